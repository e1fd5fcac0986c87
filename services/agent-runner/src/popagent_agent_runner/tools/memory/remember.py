"""`remember`: keep a durable fact or preference in long-term memory (popagent_memories)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field
from pydantic_ai import RunContext, Tool

from popagent_agent_runner.context.deps import TurnDeps
from popagent_agent_runner.memory.long_term import MAX_CONTENT_CHARS
from popagent_core.secret_text import REDACTED


async def remember(
    ctx: RunContext[TurnDeps],
    content: Annotated[
        str,
        Field(min_length=1, max_length=MAX_CONTENT_CHARS, description="the fact, stated on its own in one sentence"),
    ],
    kind: Annotated[
        Literal["fact", "preference"], Field(description="a fact about the user or world, or a preference")
    ] = "fact",
) -> dict[str, Any]:
    """Store a durable fact or preference the user wants kept across conversations.

    Use it only for lasting facts or preferences, never for secrets, credentials or one-off details:
    anything that looks like a password, key or token is withheld (stored as [redacted]).
    Restating a known memory updates it (the newer statement wins) instead of adding a copy; a memory
    the user pinned stays as the user wrote it.
    """
    turn = ctx.deps.turn
    remembered = await turn.memories.remember(content, kind=kind, session_id=turn.session_id, turn_id=turn.turn_id)
    memory = remembered.memory
    result: dict[str, Any] = {
        "id": memory.id,
        "stored": remembered.outcome == "created",
        "merged": remembered.outcome == "merged",
        "alreadyKnown": remembered.outcome == "kept",
        "pinned": memory.pinned,
        "content": memory.content,
    }
    if remembered.withheld:
        # Said outright, so the model does not believe (and tell the user) that it kept the secret.
        result["withheld"] = remembered.withheld
        result["note"] = withheld_note(remembered.withheld, remembered.outcome)
    return result


# What happened to the memory, as the note about withheld credentials starts.
_OUTCOME_WORDS = {"created": "stored", "merged": "stored over an earlier memory", "kept": "already known"}


def withheld_note(count: int, outcome: str) -> str:
    credentials = "credential" if count == 1 else "credentials"
    return (
        f"{_OUTCOME_WORDS[outcome]}, with {count} {credentials} withheld ({REDACTED}): the secret itself was not kept"
    )


TOOL: Tool[TurnDeps] = Tool(remember, name="remember")
