"""How a chat turn fails: provider errors, broken streams, a client going away, usage limits."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlsplit

import grpc
import orjson
import pytest

from chat.helpers import (
    chat,
    chat_in_a_new_session,
    conversation_of,
    new_session,
    recorded_turn,
    runtime_settings,
    shape,
    streamed_on_runner,
    text_of,
    thread_rows,
    turn_events,
    user_message,
)
from support.model_gateway import ToolCall, Turn
from support.stacks import MODEL, Stack
from support.waiting import eventually


async def test_a_provider_500_is_an_error_chunk_with_stop_failure_and_nothing_stored(stack: Stack) -> None:
    stack.models.push(Turn.fail(500, "upstream exploded"))
    session, chunks = await chat_in_a_new_session(stack, "hi")
    assert shape(chunks) == [
        {"type": "start"},
        {"type": "start-step"},
        {"type": "finish-step"},
        {
            "type": "error",
            "errorText": "The model provider failed (HTTP 500): upstream exploded. Send the message again; if it keeps failing, pick another model.",
        },
        "[DONE]",
    ]
    [failure] = stack.hook_requests("StopFailure")
    assert failure["detail"] == {
        "errorClass": "server_error",
        "statusCode": 500,
        "retryAfter": None,
        "message": "upstream exploded",
        "inStream": False,
    }
    assert stack.hook_requests("Stop") == []
    # The prompt is kept and the answer says how the turn ended (issue 22, finding 3).
    user, assistant = await recorded_turn(stack, session)
    assert user["parts"] == [{"type": "text", "text": "hi"}]
    assert (
        assistant["metadata"]["failure"]
        == "The model provider failed (HTTP 500): upstream exploded. Send the message again; if it keeps failing, pick another model."
    )
    assert "interrupted" not in assistant["metadata"]
    [event] = await turn_events(stack, session)
    assert (event.kind, event.failure_class) == ("failure", "server_error")
    assert "upstream exploded" in event.evidence


async def test_a_429_reports_the_retry_after(stack: Stack) -> None:
    stack.models.push(Turn.fail(429, "slow down", retry_after=7))
    _, chunks = await chat_in_a_new_session(stack, "hi")
    assert chunks[-2] == {
        "type": "error",
        "errorText": "The model provider is rate limiting requests (HTTP 429, retry after 7 s): slow down. "
        "Wait a moment, then send the message again.",
    }
    [failure] = stack.hook_requests("StopFailure")
    assert (failure["detail"]["errorClass"], failure["detail"]["statusCode"], failure["detail"]["retryAfter"]) == (
        "rate_limit",
        429,
        7,
    )


async def test_a_broken_stream_ends_in_an_error_after_the_text_so_far(stack: Stack) -> None:
    stack.models.push(Turn.say("This answer will never finish.", chunk_size=5, break_after_chunks=3))
    session, chunks = await chat_in_a_new_session(stack, "hi")
    shaped = shape(chunks)
    assert shaped[:3] == [{"type": "start"}, {"type": "start-step"}, {"type": "text-start", "id": "t1"}]
    assert shaped[-4:-1] == [
        {"type": "text-end", "id": "t1"},
        {"type": "finish-step"},
        {"type": "error", "errorText": shaped[-2]["errorText"]},
    ]
    assert shaped[-2]["errorText"] == (
        f"The connection to the model gateway at 127.0.0.1:{urlsplit(stack.models.url).port} broke during the "
        "answer; what arrived is kept. Send the message again."
    )
    assert "This answer will never finish.".startswith(text_of(chunks)) and text_of(chunks)
    [failure] = stack.hook_requests("StopFailure")
    assert (failure["detail"]["errorClass"], failure["detail"]["inStream"]) == ("connection", True)
    # What was streamed is stored with the failure mark.
    _, assistant = await recorded_turn(stack, session)
    assert assistant["metadata"]["failure"] == shaped[-2]["errorText"]
    assert [p["text"] for p in assistant["parts"] if p["type"] == "text"] == [text_of(chunks)]


async def test_with_continue_on_disconnect_off_a_client_disconnect_mid_stream_cancels_the_turn(stack: Stack) -> None:
    stack.models.push(Turn.say("x" * 400, chunk_size=2, chunk_delay_s=0.01))
    async with stack.client() as client, runtime_settings(client, continueOnDisconnect=False):
        session = await new_session(client)
        async with client.stream(
            "POST", "/api/chat", json={"id": session, "model": MODEL, "message": user_message("long please")}
        ) as response:
            assert response.status_code == 200
            async for line in response.aiter_lines():
                if '"text-delta"' in line:
                    break
        # The model stream is abandoned too: the turn was cancelled all the way down.
        await eventually(lambda: stack.models.disconnected == 1, within=5, what="the model stream to be abandoned")

    # The prompt and what was streamed are kept, marked interrupted.
    async def interrupted_answer() -> dict | None:  # type: ignore[type-arg]
        turn = await recorded_turn_or_none(stack, session)
        return turn[1] if turn is not None and "interrupted" in turn[1]["metadata"] and turn[1]["parts"] else None

    assistant = await eventually(interrupted_answer, within=5, what="the interrupted answer")
    assert assistant is not None
    assert assistant["metadata"]["interrupted"] is True
    streamed = "".join(p["text"] for p in assistant["parts"] if p["type"] == "text")
    assert streamed and set(streamed) == {"x"}
    assert await turn_events(stack, session) == []
    assert stack.hook_requests("StopFailure") == stack.hook_requests("Stop") == []


async def test_the_final_step_is_reserved_and_a_model_that_ignores_it_ends_with_a_limit_message(
    stack: Stack,
) -> None:
    async with stack.client() as client, runtime_settings(client, supervisorMaxSteps=2):
        # The scripted model keeps calling a tool even on the step that has none.
        stack.models.push(
            Turn.call(ToolCall("getTime", {}, id="c1")),
            Turn.call(ToolCall("getTime", {}, id="c2")),
            Turn.say("never used"),
        )
        session = await new_session(client)
        chunks = await chat(client, session, "loop forever")
    first, second = stack.models.requests[:2]
    assert [t["function"]["name"] for t in first["tools"]][:1] == ["getTime"]
    # The last step offers no tools and carries the persisted final-response feedback.
    assert "tools" not in second
    system = "\n".join(m["content"] for m in second["messages"] if m["role"] == "system")
    assert "Reply to the user now with a complete final response" in system
    assert "Reply to the user now" not in "\n".join(m["content"] for m in first["messages"] if m["role"] == "system")
    assert chunks[-2] == {"type": "finish", "finishReason": "length", "messageMetadata": chunks[-2]["messageMetadata"]}
    assert text_of(chunks).startswith("I stopped before finishing: this turn reached its limit of 2 model steps")
    rows = await thread_rows(stack, session)
    assert [role for _, role, _ in rows] == ["user", "assistant"]
    # The next turn sees the prompt and the account of the limit, not the unfinished tool calls.
    stack.models.push(Turn.say("again"))
    async with stack.client() as client:
        await chat(client, session, "continue")
    replay = conversation_of(stack.models.requests[-1])
    assert replay[0] == ("user", "loop forever")
    assert replay[1][0] == "assistant" and replay[1][1].startswith("I stopped before finishing")
    assert replay[2] == ("user", "continue")


async def test_a_model_that_answers_on_its_final_step_completes_normally(stack: Stack) -> None:
    async with stack.client() as client, runtime_settings(client, supervisorMaxSteps=2):
        stack.models.push(Turn.call(ToolCall("getTime", {}, id="c1")), Turn.say("Here is my answer."))
        session = await new_session(client)
        chunks = await chat(client, session, "time?")
    assert text_of(chunks) == "Here is my answer."
    assert chunks[-2]["finishReason"] == "stop"


async def recorded_turn_or_none(stack: Stack, session: str) -> tuple[dict, dict] | None:  # type: ignore[type-arg]
    try:
        return await recorded_turn(stack, session)
    except AssertionError:
        return None


async def test_the_prompt_is_stored_before_any_of_the_answer_is_streamed(stack: Stack) -> None:
    """Issue 22 finding 3: a turn that dies once its answer is streaming (runner killed) still keeps
    the prompt; its answer reads `interrupted` until the turn ends and replaces it. (The prompt is
    stored while the model is asked, so storing it costs no time to first token.)"""
    stack.models.push(Turn.say("slow answer", chunk_size=2, chunk_delay_s=0.2))
    body = {"id": "", "message": user_message("keep me"), "model": MODEL}
    async with stack.client() as client:
        session = body["id"] = await new_session(client)
        chunks: list[Any] = []
        async with client.stream("POST", "/api/chat", json=body) as response:
            lines = response.aiter_lines()
            async for line in lines:
                if line.startswith("data: {"):
                    chunks.append(orjson.loads(line.removeprefix("data: ")))
                    if chunks[-1]["type"] == "text-delta":
                        break
            # The first of the answer is out: the prompt and the placeholder are stored.
            loaded = (await client.get(f"/api/sessions/{session}")).json()
            user, placeholder = loaded["messages"]
            assert user["parts"] == [{"type": "text", "text": "keep me"}]
            assert (placeholder["role"], placeholder["metadata"]["interrupted"]) == ("assistant", True)
            chunks += [orjson.loads(line.removeprefix("data: ")) async for line in lines if line.startswith("data: {")]
    # The complete answer replaced the placeholder, under the id the stream announced.
    _, assistant = await recorded_turn(stack, session)
    assert assistant["id"] == placeholder["id"] == chunks[0]["messageId"]
    assert "interrupted" not in assistant["metadata"] and "failure" not in assistant["metadata"]
    assert text_of(chunks) == "slow answer"


async def test_no_answer_reaches_the_client_while_its_prompt_waits_to_be_stored(stack: Stack) -> None:
    """The model is asked while the prompt is being stored, but the answer is held until it is:
    with the session row locked, the model answers and the stream carries nothing past `start`."""
    stack.models.push(Turn.say("held answer"))
    body = {"id": "", "message": user_message("hold me"), "model": MODEL}
    async with stack.client() as client, stack.db() as conn:
        session = body["id"] = await new_session(client)
        chunks: list[Any] = []

        async def read() -> None:
            async with client.stream("POST", "/api/chat", json=body) as response:
                async for line in response.aiter_lines():
                    if line.startswith("data: {"):
                        chunks.append(orjson.loads(line.removeprefix("data: ")))

        locked = conn.transaction()
        await locked.start()
        await conn.execute("SELECT 1 FROM popagent_sessions WHERE id = $1 FOR UPDATE", session)
        reading = asyncio.create_task(read())
        try:
            await eventually(lambda: len(stack.models.requests) == 1, what="the model call")
            await asyncio.sleep(0.3)
            assert [chunk["type"] for chunk in chunks] == ["start"]
        finally:
            await locked.rollback()
        await reading
    assert text_of(chunks) == "held answer"
    user, assistant = await recorded_turn(stack, session)
    assert user["parts"] == [{"type": "text", "text": "hold me"}] and "interrupted" not in assistant["metadata"]


async def test_a_stopping_runner_hands_its_chat_turn_over_within_the_grace_period(stack: Stack) -> None:
    """RELIABILITY row 10 in-process: a stop during a streamed turn ends its call within the grace
    period (UNAVAILABLE: the gateway follows the turn on, docs/turns.md, Takeover), and another
    runner takes the turn over and stores its answer."""
    from popagent.agent_runner.v1 import agent_runner_pb2 as pb
    from popagent.agent_runner.v1 import agent_runner_pb2_grpc
    from popagent_agent_runner.service import SERVER_GRACE_S, TASK_TURN_GRACE_S
    from popagent_core.grpc_client import open_channel

    stack.models.push(Turn.say("word " * 100, chunk_size=5, chunk_delay_s=0.1), Turn.say("finished elsewhere"))
    async with stack.client() as client:
        session = await new_session(client)
    runner = stack.extra_runner()
    address = await runner.__aenter__()
    events: list[pb.TurnEvent] = []
    async with open_channel(address, stack.tokens["gateway"]) as channel:
        stub = agent_runner_pb2_grpc.AgentRunnerServiceStub(channel)
        call = asyncio.create_task(streamed_on_runner(stub, session, "long", events))
        await eventually(lambda: any(e.HasField("text_delta") for e in events), what="streamed text")
        stopping = asyncio.get_running_loop().time()
        stop = asyncio.create_task(runner.__aexit__(None, None, None))
        async with asyncio.timeout(TASK_TURN_GRACE_S + SERVER_GRACE_S + 2):
            with pytest.raises(grpc.aio.AioRpcError) as ended:
                await call
            ended_in = asyncio.get_running_loop().time() - stopping
            await stop
    assert ended.value.code() is grpc.StatusCode.UNAVAILABLE
    assert ended_in < TASK_TURN_GRACE_S + 2

    async def status() -> str | None:
        async with stack.db() as conn:
            return await conn.fetchval("SELECT status FROM popagent_turns WHERE session_id = $1", session)

    assert await eventually(status, until=lambda s: s != "running", within=30) == "completed"
    _, assistant = await recorded_turn(stack, session)
    assert "".join(p["text"] for p in assistant["parts"] if p["type"] == "text") == "finished elsewhere"
