"""PostgreSQL is the only source of the agents' profiles: with the supervisor's row missing, a chat turn is
refused as a configuration error naming it, before any model call or stored message, and never runs on
defaults from code."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from chat.helpers import chat, new_session, text_of, thread_rows
from support.model_gateway import Turn
from support.stacks import Stack


@contextlib.asynccontextmanager
async def supervisor_profile_removed(stack: Stack) -> AsyncIterator[None]:
    """The `popagent` row (and its skills, which its deletion cascades to) gone for the block, then put back
    as it was: the stack is shared by the chat suite."""
    async with stack.db() as conn:
        await conn.execute("CREATE TEMP TABLE saved_agent AS SELECT * FROM popagent_agents WHERE id = 'popagent'")
        await conn.execute(
            "CREATE TEMP TABLE saved_skills AS SELECT * FROM popagent_agent_skills WHERE agent_id = 'popagent'"
        )
        assert await conn.fetchval("SELECT count(*) FROM saved_agent") == 1
        await conn.execute("DELETE FROM popagent_agents WHERE id = 'popagent'")
        try:
            yield
        finally:
            async with conn.transaction():
                await conn.execute("INSERT INTO popagent_agents SELECT * FROM saved_agent")
                await conn.execute("INSERT INTO popagent_agent_skills SELECT * FROM saved_skills")


async def test_a_missing_supervisor_profile_refuses_the_turn_naming_it(stack: Stack) -> None:
    async with stack.client() as client:
        session = await new_session(client)
        async with supervisor_profile_removed(stack):
            [refusal] = await chat(client, session, "hello", expect_status=409)
        assert refusal["error"] == "agent profile 'popagent' is missing"
        assert stack.models.requests == []
        assert await thread_rows(stack, session) == []
        # With the row back, the same session's next turn runs.
        stack.models.push(Turn.say("Back."))
        assert text_of(await chat(client, session, "hello again")) == "Back."
