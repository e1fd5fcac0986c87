"""`remember`: keep a durable fact or preference in long-term memory (popagent_memories)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field
from pydantic_ai import RunContext, Tool

from popagent_agent_runner.turn.deps import TurnDeps
from popagent_agent_runner.turn.memories import MAX_CONTENT_CHARS


async def remember(
    ctx: RunContext[TurnDeps],
    content: Annotated[
        str,
        Field(min_length=1, max_length=MAX_CONTENT_CHARS, description="the fact, stated on its own in one sentence"),
    ],
) -> dict[str, Any]:
    """Store a durable fact or preference the user wants kept across conversations.

    Use it only for lasting facts or preferences, never for secrets, credentials or one-off details.
    """
    turn = ctx.deps.turn
    memory, created = await turn.memories.create(
        content, source="agent", session_id=turn.session_id, turn_id=turn.turn_id
    )
    return {"id": memory.id, "stored": created, "alreadyKnown": not created}


TOOL: Tool[TurnDeps] = Tool(remember, name="remember")
