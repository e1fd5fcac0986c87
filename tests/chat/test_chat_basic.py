"""POST /api/chat end to end over real HTTP: plain answers, tools, threads, the request contract."""

from __future__ import annotations

import contextlib
import json
import time
from unittest.mock import ANY

import nats.js.errors

from chat.helpers import (
    chat,
    chat_in_a_new_session,
    conversation_of,
    finished_stream,
    new_session,
    of_type,
    shape,
    text_step,
    thread_rows,
    tool_input,
    turn_events,
    turn_note,
    user_message,
)
from popagent.events.v1 import events_pb2
from popagent_core import bus, subjects
from support.model_gateway import ToolCall, Turn, Usage
from support.stacks import MODEL, Stack
from support.waiting import eventually


async def test_a_plain_answer_streams_the_exact_chunk_sequence_and_is_stored(stack: Stack) -> None:
    stack.models.push(Turn.say("Hello there, friend.", chunk_size=5))
    async with stack.client() as client:
        session = await new_session(client)
        message = user_message("hi")
        chunks = await chat(client, session, message)

    assert shape(chunks) == finished_stream(text_step("Hello there, friend."))
    start, finish = chunks[0], chunks[-2]
    turn_id = start["messageMetadata"]["turnId"]
    trace_id = start["messageMetadata"]["traceId"]
    assert len(trace_id) == 32 and int(trace_id, 16)
    assert start["messageMetadata"] == {"turnId": turn_id, "model": MODEL, "traceId": trace_id}
    usage = finish["messageMetadata"]["usage"]
    assert finish["messageMetadata"] == {"turnId": turn_id, "usage": usage}
    assert usage["outputTokens"] > 0 and usage["inputTokens"] > 0

    rows = await thread_rows(stack, session)
    assert [(row_id, role) for row_id, role, _ in rows] == [(message["id"], "user"), (start["messageId"], "assistant")]
    assert rows[0][2]["ui"] == message
    assert rows[1][2]["ui"] == {
        "id": start["messageId"],
        "role": "assistant",
        "parts": [{"type": "step-start"}, {"type": "text", "text": "Hello there, friend.", "state": "done"}],
        "metadata": {"turnId": turn_id, "model": MODEL, "traceId": trace_id, "usage": usage},
    }
    [event] = await turn_events(stack, session)
    assert (event.turn_id, event.kind, event.goal, event.evidence, event.agent_id) == (
        turn_id,
        "outcome",
        "hi",
        "Hello there, friend.",
        "popagent",
    )
    assert len(event.trace_id) == 32


async def test_a_turn_whose_provider_reported_only_an_estimate_is_marked_estimated(stack: Stack) -> None:
    # 9Router's estimate on the finish chunk, and no real usage chunk after it from the upstream.
    stack.models.push(Turn.say("Roughly so.", usage=Usage(40, 5), usage_chunk=False))
    stack.models.ninerouter_usage = True
    try:
        session, chunks = await chat_in_a_new_session(stack, "how much?")
    finally:
        stack.models.ninerouter_usage = False

    # The scripted estimate is the real figures plus 7 and 3.
    estimated = {"inputTokens": 47, "outputTokens": 8, "estimated": True}
    assert chunks[-2]["messageMetadata"]["usage"] == estimated
    rows = await thread_rows(stack, session)
    assert rows[-1][2]["ui"]["metadata"]["usage"] == estimated


async def test_text_streams_as_the_model_produces_it(stack: Stack) -> None:
    """The first token goes out at once and the rest follows as it arrives, never the whole answer at the end."""
    stack.models.push(Turn.say("".join(f"w{n} " for n in range(12)), chunk_size=3, chunk_delay_s=0.1))
    async with stack.client() as client:
        session = await new_session(client)
        message = user_message("slowly please")
        started = time.monotonic()
        arrivals: list[float] = []
        async with client.stream("POST", "/api/chat", json={"id": session, "model": MODEL, "message": message}) as r:
            async for line in r.aiter_lines():
                if '"text-delta"' in line:
                    arrivals.append(time.monotonic() - started)
    # The model takes 1.2 s for the whole answer (13 chunks, 100 ms apart): the text arrives spread over
    # most of that time, in many pieces. (Measured from the first arrival, not from the request: the
    # turn's set-up time is a benchmark's business, and a loaded CI machine stretches it.)
    assert arrivals[-1] - arrivals[0] > 0.8, arrivals
    assert len(arrivals) >= 8, arrivals


async def test_the_turn_outcome_reaches_jetstream_through_the_outbox(stack: Stack) -> None:
    stack.models.push(Turn.say("Relayed."))
    session, chunks = await chat_in_a_new_session(stack, "publish me")
    turn_id = chunks[0]["messageMetadata"]["turnId"]
    async with bus.connect(stack.nats_url, name="chat-tests") as nc:
        js = nc.jetstream()

        async def relayed() -> events_pb2.TurnCompleted | None:
            with contextlib.suppress(nats.js.errors.NotFoundError):
                last = await js.get_last_msg(subjects.stream_name("agent_runner"), subjects.TURN_COMPLETED)
                event = events_pb2.TurnCompleted.FromString(last.data or b"")
                if event.turn_id == turn_id:
                    return event
            return None

        event = await eventually(relayed, within=10, what="TurnCompleted to be relayed")
        assert event is not None
    assert (event.session_id, event.kind, event.goal, event.evidence) == (session, "outcome", "publish me", "Relayed.")


async def test_the_next_turn_gets_the_thread_as_history_and_the_model_sees_the_selected_route(
    stack: Stack,
) -> None:
    stack.models.push(Turn.say("First answer."), Turn.say("Second answer."))
    async with stack.client() as client:
        session = await new_session(client)
        await chat(client, session, "first question")
        await chat(client, session, "second question", model=None)

    first, second = stack.models.requests
    assert first["model"] == MODEL
    # No model in the request: the persisted default route.
    assert second["model"] == "cx/gpt-5.3-codex"
    assert conversation_of(second) == [
        ("user", "first question"),
        ("assistant", "First answer."),
        ("user", "second question"),
    ]
    # Instructions come from the persisted profile on every run, not from stored history.
    systems = [m for m in second["messages"] if m["role"] == "system"]
    assert len(systems) == 1 and systems[0]["content"].startswith("You are popagent")


async def test_a_tool_call_streams_input_and_output_then_the_answer(stack: Stack) -> None:
    stack.models.push(
        Turn.call(ToolCall("getTime", {"time_zone": "Europe/Paris"}, id="call-time")),
        Turn.say("It is noon.", chunk_size=20),
    )
    session, chunks = await chat_in_a_new_session(stack, "what time is it?")

    assert shape(chunks) == finished_stream(
        [
            {"type": "start-step"},
            *tool_input("getTime", {"time_zone": "Europe/Paris"}),
            {"type": "tool-output-available", "toolCallId": "c1", "output": ANY},
            {"type": "finish-step"},
        ],
        text_step("It is noon."),
    )
    output = chunks[4]["output"]
    assert output["timeZone"] == "Europe/Paris" and output["iso"][-6:] in {"+01:00", "+02:00"}
    # The model got the tool result back, under the call's id.
    tool_message = stack.models.requests[1]["messages"][-1]
    assert tool_message["role"] == "tool" and tool_message["tool_call_id"] == "call-time"
    assert json.loads(tool_message["content"]) == output
    # PreToolUse saw the arguments before the tool ran, PostToolUse the result after.
    [pre] = stack.hook_requests("PreToolUse")
    [post] = stack.hook_requests("PostToolUse")
    assert (pre["toolCallId"], pre["detail"]) == (
        "call-time",
        {"toolName": "getTime", "arguments": {"time_zone": "Europe/Paris"}, "agent": "popagent"},
    )
    assert post["detail"]["result"] == output
    assert pre["turnId"] == post["turnId"] == chunks[0]["messageMetadata"]["turnId"]

    # The stored turn replays the tool call for the next turn.
    rows = await thread_rows(stack, session)
    parts = rows[1][2]["ui"]["parts"]
    assert [p["type"] for p in parts] == ["step-start", "tool-getTime", "step-start", "text"]
    assert parts[1] == {
        "type": "tool-getTime",
        "toolCallId": "call-time",
        "state": "output-available",
        "input": {"time_zone": "Europe/Paris"},
        "output": output,
    }


async def test_a_tool_error_goes_back_to_the_model_and_shows_as_an_output_error(stack: Stack) -> None:
    stack.models.push(
        Turn.call(ToolCall("getTime", {"time_zone": "Mars/Olympus"}, id="call-bad")),
        Turn.say("Sorry."),
    )
    _, chunks = await chat_in_a_new_session(stack, "time on mars?")
    [error] = of_type(chunks, "tool-output-error")
    assert error["toolCallId"] == "call-bad" and "unknown time zone 'Mars/Olympus'" in error["errorText"]
    assert "unknown time zone" in stack.models.requests[1]["messages"][-1]["content"]
    [failure] = stack.hook_requests("PostToolUseFailure")
    assert "unknown time zone" in failure["detail"]["error"]
    assert stack.hook_requests("PostToolUse") == []


async def test_remember_stores_a_memory_and_a_later_session_recalls_it(stack: Stack) -> None:
    fact = "The user's favourite editor is Helix with a dark theme."
    stack.models.push(
        Turn.call(ToolCall("remember", {"content": fact}, id="call-mem")),
        Turn.say("Noted."),
        Turn.say("You like Helix."),
    )
    async with stack.client() as client:
        first = await new_session(client)
        chunks = await chat(client, first, "remember that my favourite editor is Helix")
        [stored] = of_type(chunks, "tool-output-available")
        assert stored["output"]["stored"] is True
        memories = (await client.get("/api/memories", params={"q": "Helix"})).json()["memories"]
        assert [(m["id"], m["content"], m["source"], m["sessionId"]) for m in memories] == [
            (stored["output"]["id"], fact, "agent", first)
        ]
        second = await new_session(client)
        await chat(client, second, "which editor do I like?")

    # No PreToolUse handler matches `remember`: the hooks service was never asked.
    assert [r["detail"]["toolName"] for r in stack.hook_requests("PreToolUse")] == []
    recall_request = stack.models.requests[2]
    assert fact in turn_note(recall_request)
    # The other session's conversation itself is not there, only the memory.
    assert [c for role, c in conversation_of(recall_request) if role == "user"] == ["which editor do I like?"]


async def test_a_retried_request_never_stores_a_message_twice(stack: Stack) -> None:
    stack.models.push(Turn.say("One."), Turn.say("Two."), Turn.say("Three."))
    async with stack.client() as client:
        session = await new_session(client)
        first = user_message("count")
        await chat(client, session, first)
        # The same message again (a retry or a regenerate): it replaces the earlier answer.
        retried = await chat(client, session, first)
        await chat(client, session, "and again")

    rows = await thread_rows(stack, session)
    assert [(role, text_of_ui(content["ui"])) for _, role, content in rows] == [
        ("user", "count"),
        ("assistant", "Two."),
        ("user", "and again"),
        ("assistant", "Three."),
    ]
    assert rows[1][0] == retried[0]["messageId"]
    # The retry's model request did not include the first answer.
    assert [content for _, content in conversation_of(stack.models.requests[1])] == ["count"]


def text_of_ui(message: dict[str, object]) -> str:
    parts = message["parts"]
    assert isinstance(parts, list)
    return "".join(p["text"] for p in parts if p["type"] == "text")


async def test_unknown_session_is_a_404_before_any_stream(stack: Stack) -> None:
    async with stack.client() as client:
        [body] = await chat(client, "no-such-session", "hi", expect_status=404)
    assert body == {"error": "session 'no-such-session' not found"}
    assert stack.models.requests == []


async def test_unknown_model_is_refused_before_the_turn(stack: Stack) -> None:
    async with stack.client() as client:
        session = await new_session(client)
        [body] = await chat(client, session, "hi", model="nobody/unknown-model", expect_status=404)
    assert "unknown model 'nobody/unknown-model'" in body["error"]
    assert stack.models.requests == []


async def test_a_workspace_other_than_the_sessions_is_refused(stack: Stack) -> None:
    async with stack.client() as client:
        session = await new_session(client)
        response = await client.post(
            "/api/chat", json={"id": session, "workspaceId": "elsewhere", "message": user_message("hi")}
        )
    assert response.status_code == 409
    assert "is not the session's workspace" in response.json()["error"]


async def test_retired_secret_tool_payloads_are_redacted_at_ingress(stack: Stack) -> None:
    stack.models.push(Turn.say("ok"))
    message = user_message("hi")
    message["parts"].append(
        {
            "type": "tool-storeSecret",
            "toolCallId": "old-1",
            "state": "output-available",
            "input": {"name": "bank", "value": "hunter2"},
            "output": {"stored": "hunter2"},
        }
    )
    session, _ = await chat_in_a_new_session(stack, message)
    rows = await thread_rows(stack, session)
    stored = rows[0][2]["ui"]["parts"][1]
    assert (stored["input"], stored["output"]) == ("[redacted]", "[redacted]")
    assert "hunter2" not in json.dumps(rows)


async def test_outcome_evidence_is_bounded_and_secret_redacted(stack: Stack) -> None:
    secret = "sk-" + "a1b2c3d4" * 4
    stack.models.push(Turn.say(f"I will not repeat {secret}. " + "filler " * 600))
    session, _ = await chat_in_a_new_session(
        stack, f"my api_key = hunter22 and the key is {secret}; " + "context " * 200
    )
    [event] = await turn_events(stack, session)
    assert secret not in event.goal and secret not in event.evidence
    assert "hunter22" not in event.goal
    assert event.goal.startswith("my api_key = [redacted] and the key is [redacted];")
    assert len(event.goal) <= 501 and len(event.evidence) <= 2001


async def test_history_written_by_another_replica_is_seen_by_the_next_turn(stack: Stack) -> None:
    """The runner keeps parsed history between turns; anything else writing the thread must win."""
    stack.models.push(Turn.say("First."), Turn.say("Second."), Turn.say("Third."))
    async with stack.client() as client:
        session = await new_session(client)
        await chat(client, session, "one")
        await chat(client, session, "two")
        rows = await thread_rows(stack, session)
        injected = {"model": rows[0][2]["model"], "ui": user_message("from another replica")}
        injected["model"][0]["parts"][0]["content"] = "from another replica"
        async with stack.db() as conn:
            await conn.execute(
                "INSERT INTO popagent_thread_messages (thread_id, id, role, content) VALUES ($1, 'other', 'user', $2)",
                session,
                json.dumps(injected),
            )
        await chat(client, session, "three")
    users = [m["content"] for m in stack.models.requests[2]["messages"] if m["role"] == "user"]
    assert users == ["one", "two", "from another replica", "three"]
    # And the cached history of the second turn matched what a fresh read gives.
    assert [content for _, content in conversation_of(stack.models.requests[1])] == [
        "one",
        "First.",
        "two",
    ]
