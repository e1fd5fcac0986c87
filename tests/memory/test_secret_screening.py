"""A password and a token pasted into a chat reach no place that keeps text: the agent's memory
(and so no later session's prompt), the observations, the turn's outcome events, evolution's
signals, the stored logs and the spans. Through the real stack: /api/chat on the chat stack, the
scripted model calling `remember` with both, evolution ingesting the failed turn."""

from __future__ import annotations

import json
import logging
import secrets
import string
from typing import Any, cast

import asyncpg
from chat.helpers import chat, new_session, turn_events
from evolution.helpers import autonomy, signals

from memory.harness import Conversations
from memory.stack_helpers import LONG, OBSERVE_IN_TURN, memory_settings
from popagent_agent_runner.memory import LONG_TERM_QUERIES
from popagent_agent_runner.memory.long_term import MemoryStore
from popagent_agent_runner.tools.memory.remember import withheld_note
from popagent_core.span_store import STORE_SCHEMA, active_stats, span_row
from support.memory_agents import memory_agents
from support.model_gateway import Body, ToolCall, Turn
from support.stacks import Stack
from support.tracing import collecting_spans
from support.waiting import eventually

PASSWORD = "Tr0ub4dor&3x9"


def fresh_github_token() -> str:
    return "ghp_" + "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(36))


def leaks(text: str, *secret_values: str) -> list[str]:
    return [value for value in secret_values if value in text]


ASK = "Which GitHub credentials and password of mine are on file?"


class ChatScript:
    """The chat model's side: `remember` with what the user pasted, then a short answer; `recall`
    when asked what it knows; a 400 while `failing` (a turn evolution learns from)."""

    def __init__(self, remembered: str) -> None:
        self.remembered = remembered
        self.failing = False
        self.called = False

    def __call__(self, body: Body) -> Turn:
        if self.failing:
            return Turn.fail(400, "bad request upstream")
        last = body["messages"][-1]
        if last["role"] == "tool":
            return Turn.say("Noted.")
        if ASK in str(last.get("content")):
            return Turn.call(ToolCall("recall", {"query": "password GitHub token"}))
        if not self.called:
            self.called = True
            return Turn.call(ToolCall("remember", {"content": self.remembered, "kind": "fact"}))
        return Turn.say("Understood.")


async def store_rows(query: str) -> str:
    """Every row a query of this process's observability store returns, as text."""
    stats = active_stats()
    assert stats is not None and stats.store_dsn, "the stack exports to an observability store"
    conn = await asyncpg.connect(stats.store_dsn, server_settings={"search_path": STORE_SCHEMA})
    try:
        return "\n".join(str(tuple(row)) for row in await conn.fetch(query))
    finally:
        await conn.close()


async def test_a_pasted_password_and_token_are_kept_nowhere(stack: Stack) -> None:
    token = fresh_github_token()
    pasted = f"my password is {PASSWORD} and my GitHub token is {token}, remember both. {LONG * 3}"
    script = ChatScript(f"The user's password is {PASSWORD} and their GitHub token is {token}.")
    stack.models.responder = memory_agents(chat=script)
    with collecting_spans() as spans:
        async with (
            stack.client() as client,
            memory_settings(client, **OBSERVE_IN_TURN, retrievalScope="resource"),
            autonomy(client, evolutionEnabled=True),
        ):
            session = await new_session(client)
            first = await chat(client, session, pasted)
            assert first[-1] == "[DONE]"
            for n in range(10):
                await chat(client, session, f"{n}: {LONG}")
            script.failing = True
            failed = await chat(client, session, f"the password is {PASSWORD}, try again")
            script.failing = False
            assert any(isinstance(chunk, dict) and chunk.get("type") == "error" for chunk in failed)
            trace = failed[0]["messageMetadata"]["traceId"]

            # The memory the agent wrote: stored with both withheld, and the model was told so.
            listed = (await client.get("/api/memories")).json()["memories"]
            [memory] = [m for m in listed if m["sessionId"] == session]
            assert memory["content"] == "The user's password is [redacted] and their GitHub token is [redacted]."
            assert not leaks(json.dumps(listed), PASSWORD, token)
            tool_results = [
                str(m["content"]) for body in stack.models.requests for m in body["messages"] if m["role"] == "tool"
            ]
            assert tool_results and all("2 credentials withheld ([redacted])" in text for text in tool_results)
            assert not leaks(str(tool_results), PASSWORD, token)

            # A new session recalls the memory and quotes the first session's message (recall over
            # every conversation), and sends the model no secret.
            stack.models.requests.clear()
            asked = await new_session(client)
            await chat(client, asked, ASK)
            quoted = [str(m["content"]) for m in stack.models.requests[-1]["messages"] if m["role"] == "tool"]
            assert any("my password is [redacted]" in text for text in quoted), quoted
            assert "The user's password is [redacted]" in json.dumps(stack.models.requests)
            assert not leaks(json.dumps(stack.models.requests), PASSWORD, token)

            # Evolution's signal of the failed turn.
            async def this_trace() -> list[dict[str, Any]]:
                return [s for s in await signals(client, "popagent") if s["traceId"] == trace]

            [signal] = cast(list[dict[str, Any]], await eventually(this_trace, what="the failed turn's signal"))
            assert signal["goal"] == "the password is [redacted], try again"
            assert not leaks(json.dumps(await signals(client, "popagent")), PASSWORD, token)

        # The observations of the session.
        async with stack.db() as db:
            observations = await db.fetch("SELECT content FROM popagent_observations WHERE thread_id = $1", session)
        assert observations, "the chat was observed"
        assert any("my password is [redacted]" in row["content"] for row in observations)
        assert not leaks(str([row["content"] for row in observations]), PASSWORD, token)

        # Every outcome event the session's turns published (the outbox is what goes on the bus).
        events = await turn_events(stack, session)
        assert len(events) >= 2 and {event.kind for event in events} >= {"failure"}
        assert not leaks(str(events), PASSWORD, token)

        # The spans of those turns, as rows and as the store holds them.
        recorded = spans.all()
        assert recorded
        assert not leaks(str([span_row(span) for span in recorded]), PASSWORD, token)
        await eventually(
            lambda: store_rows(f"SELECT trace_id FROM popagent_spans WHERE trace_id = '{trace}'"),
            what="the failed turn's spans in the store",
        )
        assert not leaks(await store_rows("SELECT * FROM popagent_spans"), PASSWORD, token)

    async with stack.client() as client:
        # The stack is shared: this test's conversations and memory must not rank in another's recall.
        for thread in (session, asked):
            assert (await client.delete(f"/api/sessions/{thread}")).status_code == 204
        assert (await client.delete(f"/api/memories/{memory['id']}")).status_code == 204


async def test_a_log_line_quoting_the_users_message_is_stored_redacted(stack: Stack) -> None:
    """The stack's stored log handler and writer (the observability store under the chat stack)."""
    token = fresh_github_token()
    marker = secrets.token_hex(4)
    logging.getLogger("popagent_agent_runner.turn.runner").warning(
        "turn %s failed on: %s", marker, f"my password is {PASSWORD} and the token is {token}", extra={"said": token}
    )
    query = f"SELECT message, attributes::text FROM popagent_logs WHERE message LIKE '%{marker}%'"
    row = await eventually(lambda: store_rows(query), what="the warning in the store")
    assert "my password is [redacted] and the token is [redacted]" in row
    assert not leaks(await store_rows("SELECT * FROM popagent_logs"), PASSWORD, token)


async def test_the_agent_s_memory_withholds_credentials_the_user_s_own_keeps_them(
    stack: Stack, conversations: Conversations
) -> None:
    store = MemoryStore(conversations.pool, LONG_TERM_QUERIES)
    tag = secrets.token_hex(3)
    first = await store.remember(
        f"Staging{tag} deploy token is {fresh_github_token()}", kind="fact", session_id="", turn_id=""
    )
    assert (first.outcome, first.withheld) == ("created", 1)
    assert first.memory.content == f"Staging{tag} deploy token is [redacted]"
    # Another token in the same words: the redacted texts are the same memory, and the note says so.
    again = await store.remember(
        f"Staging{tag} deploy token is {fresh_github_token()}", kind="fact", session_id="", turn_id=""
    )
    assert (again.outcome, again.withheld, again.memory.id) == ("kept", 1, first.memory.id)
    assert withheld_note(again.withheld, again.outcome).startswith("already known, with 1 credential withheld")

    # What the user types into /api/memories is the user's choice.
    async with stack.client() as client:
        typed = f"Locker{tag} password is {PASSWORD}"
        created = await client.post("/api/memories", json={"content": typed, "kind": "fact"})
        assert created.status_code == 201, created.text
        assert created.json()["content"] == typed
        assert (await client.delete(f"/api/memories/{created.json()['id']}")).status_code == 204
    await store.delete(first.memory.id)
