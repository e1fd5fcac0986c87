"""`recall`: search the original messages of past conversation for exact quotes with their dates."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field
from pydantic_ai import RunContext, Tool

from popagent_agent_runner.context.deps import TurnDeps
from popagent_agent_runner.memory.observational.recall import MAX_RESULTS


async def recall(
    ctx: RunContext[TurnDeps],
    query: Annotated[str, Field(min_length=1, max_length=500, description="words the messages you look for contain")],
    limit: Annotated[int, Field(ge=1, le=MAX_RESULTS, description="how many messages at most")] = 5,
) -> dict[str, Any]:
    """Find earlier messages of the conversation (or of all conversations, as configured) and quote them exactly.

    Use it when you need the exact words, numbers or dates of something said earlier that your
    observations only summarize. Each result has the message's date and role.
    """
    search = ctx.deps.turn.history_search
    if search is None:
        return {"messages": [], "note": "recall is not available in this process"}
    found = await search.search(ctx.deps.turn.session_id, query, limit, asking_id=ctx.deps.turn.message_id)
    return {"messages": [item.to_json() for item in found]}


TOOL: Tool[TurnDeps] = Tool(recall, name="recall")
