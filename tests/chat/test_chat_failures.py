"""How a chat turn fails: provider errors, broken streams, a client going away, usage limits."""

from __future__ import annotations

import asyncio

from chat.helpers import chat, new_session, runtime_settings, shape, text_of, thread_rows, turn_events, user_message
from support.model_gateway import ToolCall, Turn
from support.stacks import MODEL, Stack
from support.waiting import eventually


async def test_a_provider_500_is_an_error_chunk_with_stop_failure_and_nothing_stored(stack: Stack) -> None:
    stack.models.push(Turn.fail(500, "upstream exploded"))
    async with stack.client() as client:
        session = await new_session(client)
        chunks = await chat(client, session, "hi")
    assert shape(chunks) == [
        {"type": "start"},
        {"type": "start-step"},
        {"type": "finish-step"},
        {"type": "error", "errorText": "The model provider failed (HTTP 500): upstream exploded"},
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
    assert await thread_rows(stack, session) == []
    [event] = await turn_events(stack, session)
    assert (event.kind, event.failure_class) == ("failure", "server_error")
    assert "upstream exploded" in event.evidence


async def test_a_429_reports_the_retry_after(stack: Stack) -> None:
    stack.models.push(Turn.fail(429, "slow down", retry_after=7))
    async with stack.client() as client:
        session = await new_session(client)
        chunks = await chat(client, session, "hi")
    assert chunks[-2] == {
        "type": "error",
        "errorText": "The model provider is rate limiting requests (HTTP 429, retry after 7 s): slow down",
    }
    [failure] = stack.hook_requests("StopFailure")
    assert (failure["detail"]["errorClass"], failure["detail"]["statusCode"], failure["detail"]["retryAfter"]) == (
        "rate_limit",
        429,
        7,
    )


async def test_a_broken_stream_ends_in_an_error_after_the_text_so_far(stack: Stack) -> None:
    stack.models.push(Turn.say("This answer will never finish.", chunk_size=5, break_after_chunks=3))
    async with stack.client() as client:
        session = await new_session(client)
        chunks = await chat(client, session, "hi")
    shaped = shape(chunks)
    assert shaped[:3] == [{"type": "start"}, {"type": "start-step"}, {"type": "text-start", "id": "t1"}]
    assert shaped[-4:-1] == [
        {"type": "text-end", "id": "t1"},
        {"type": "finish-step"},
        {"type": "error", "errorText": shaped[-2]["errorText"]},
    ]
    assert shaped[-2]["errorText"].startswith("The connection to the model provider broke")
    assert "This answer will never finish.".startswith(text_of(chunks)) and text_of(chunks)
    [failure] = stack.hook_requests("StopFailure")
    assert (failure["detail"]["errorClass"], failure["detail"]["inStream"]) == ("connection", True)
    assert await thread_rows(stack, session) == []


async def test_a_client_disconnect_mid_stream_cancels_the_turn(stack: Stack) -> None:
    stack.models.push(Turn.say("x" * 400, chunk_size=2, chunk_delay_s=0.01))
    async with stack.client() as client:
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
    await asyncio.sleep(0.2)
    assert await thread_rows(stack, session) == []
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
    replay = [(m["role"], m["content"]) for m in stack.models.requests[-1]["messages"] if m["role"] != "system"]
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
