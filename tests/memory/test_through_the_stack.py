"""Observational memory through the real stack: settings over /api/settings/memory, turns over
/api/chat (gateway -> gRPC -> agent-runner -> the scripted model over HTTP), session deletion."""

from __future__ import annotations

from chat.helpers import chat, new_session
from pydantic_ai.messages import ModelMessagesTypeAdapter

from memory.stack_helpers import LONG, OBSERVE_IN_TURN, memory_settings
from popagent_agent_runner.memory.observational.layout import PREAMBLE
from popagent_agent_runner.memory.observational.tokens import count_messages
from support.memory_agents import is_observer, memory_agents
from support.model_gateway import ToolCall, Turn
from support.stacks import Stack


async def test_a_long_chat_is_observed_and_deleting_the_session_removes_its_observations(stack: Stack) -> None:
    stack.models.responder = memory_agents()
    async with (
        stack.client() as client,
        memory_settings(
            client,
            **OBSERVE_IN_TURN,
        ),
    ):
        session = await new_session(client)
        for n in range(14):
            chunks = await chat(client, session, f"{n}: {LONG}")
            assert chunks[-1] == "[DONE]"
        assert any(is_observer(body) for body in stack.models.requests)
        last = [b for b in stack.models.requests if not is_observer(b)][-1]
        system = [str(m["content"]) for m in last["messages"] if m["role"] == "system"]
        assert any(PREAMBLE in content and "User said: 0: Here is a long message" in content for content in system)
        # Only the newest messages are sent raw; the thread keeps every one of them.
        assert not any(str(m.get("content", "")).startswith("0: Here") for m in last["messages"])
        async with stack.db() as db:
            stored = await db.fetchval("SELECT count(*) FROM popagent_thread_messages WHERE thread_id = $1", session)
            observations = await db.fetchval("SELECT count(*) FROM popagent_observations WHERE thread_id = $1", session)
        assert stored == 28 and observations is not None and observations >= 1

        assert (await client.delete(f"/api/sessions/{session}")).status_code == 204
        async with stack.db() as db:
            left = await db.fetchval("SELECT count(*) FROM popagent_observations WHERE thread_id = $1", session)
            state = await db.fetchval("SELECT count(*) FROM popagent_observation_state WHERE thread_id = $1", session)
        assert (left, state) == (0, 0)


async def test_the_session_memory_view_shows_the_log_and_the_tokens_saved(stack: Stack) -> None:
    stack.models.responder = memory_agents()
    async with (
        stack.client() as client,
        memory_settings(
            client, observationMessageTokens=1000, asyncObservationEnabled=False, rawHistoryRetentionMessages=2
        ),
    ):
        session = await new_session(client)
        empty = (await client.get(f"/api/sessions/{session}/memory")).json()
        assert (empty["entries"], empty["lastCompactionAt"], empty["tokensSaved"]) == ([], None, 0)
        for n in range(10):
            await chat(client, session, f"{n}: {LONG}")
        view = (await client.get(f"/api/sessions/{session}/memory")).json()
        assert view["entries"] and view["entries"][0]["kind"] == "observation"
        assert "User said: 0: Here is a long message" in view["entries"][0]["content"]
        assert view["lastCompactionAt"] is not None
        assert view["tokensSaved"] == view["observedMessageTokens"] - view["observationTokens"] > 0
        assert view["rawMessages"] >= 2
        assert (await client.get("/api/sessions/no-such-session/memory")).status_code == 404


async def test_a_turn_stores_its_messages_with_their_token_counts(stack: Stack) -> None:
    # With the memory off nothing after the turn reads the messages back: the counts are the commit's.
    stack.models.responder = memory_agents()
    async with stack.client() as client, memory_settings(client, enabled=False):
        session = await new_session(client)
        assert (await chat(client, session, f"Count this: {LONG}"))[-1] == "[DONE]"
        async with stack.db() as db:
            rows = await db.fetch(
                "SELECT role, (content -> 'model')::text AS model, tokens FROM popagent_thread_messages"
                " WHERE thread_id = $1 ORDER BY seq",
                session,
            )
    assert [row["role"] for row in rows] == ["user", "assistant"]
    for row in rows:
        assert row["tokens"] == count_messages(ModelMessagesTypeAdapter.validate_json(row["model"])) > 0


async def test_a_chat_is_the_users_memory_thread_named_by_its_id_and_a_delegation_a_child_thread(
    stack: Stack,
) -> None:
    # The chat id is the memory thread's id, on the single user's resource (`popagent-user`, what
    # recall's `resource` scope browses); a specialist's run is a thread of its own under it.
    stack.models.push(
        Turn.call(ToolCall("researcher", {"brief": "Find the time."}, id="call-d")),
        Turn.say("It is noon."),
        Turn.say("Noon."),
    )
    async with stack.client() as client:
        session = await new_session(client)
        await chat(client, session, "what time is it?")
    async with stack.db() as db:
        threads = await db.fetch(
            "SELECT id, resource_id, parent_id FROM popagent_threads WHERE id = $1 OR parent_id = $1 ORDER BY parent_id NULLS FIRST",
            session,
        )
    [chat_thread, specialist_thread] = [tuple(row) for row in threads]
    assert chat_thread == (session, "popagent-user", None)
    assert specialist_thread[1:] == ("popagent-specialist:researcher", session)
    assert specialist_thread[0] != session
