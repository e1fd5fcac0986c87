"""Lifecycle hooks at every point of a chat turn, through the real hooks service and a real HTTPS receiver."""

from __future__ import annotations

import base64
import uuid

from chat.helpers import (
    chat,
    chat_in_a_new_session,
    conversation_of,
    finished_stream,
    new_session,
    of_type,
    recorded_turn,
    shape,
    text_of,
    text_step,
    thread_rows,
    tool_input,
    turn_events,
    turn_note,
    user_message,
)
from popagent.agent_runner.v1 import agent_runner_pb2, agent_runner_pb2_grpc
from popagent_core.grpc_client import open_channel
from popagent_gateway.runners import rendezvous
from support.https_receiver import Reply, answer
from support.model_gateway import ToolCall, Turn
from support.stacks import Stack


async def test_session_start_fires_at_creation_and_not_again_for_its_turns(stack: Stack) -> None:
    # agent-runner runs as two workers here: the gateway sends a session's creation and all of its
    # turns to one of them, so SessionStart fires once (round robin would fire it again on resume).
    stack.models.push(*(Turn.say(word) for word in ("one", "two", "three", "four", "five")))
    async with stack.client() as client:
        first = await new_session(client)
        second = await new_session(client)
        for prompt in ("a", "b", "c", "d"):
            await chat(client, first, prompt)
        await chat(client, second, "e")
    starts = stack.hook_requests("SessionStart")
    assert [(r["sessionId"], r["detail"]) for r in starts] == [
        (first, {"workspaceId": "popagent", "source": "create"}),
        (second, {"workspaceId": "popagent", "source": "create"}),
    ]


async def test_session_start_fires_on_the_first_resume_in_a_process_that_did_not_create_it(
    stack: Stack,
) -> None:
    # Created by the worker its turns do not go to (as after a restart, or by another process):
    # the worker that runs its first turn resumes it, once.
    session = f"resumed-{uuid.uuid4().hex}"
    other = rendezvous(session, stack.runner_workers)[1]
    async with open_channel(other, stack.tokens["gateway"]) as channel:
        await agent_runner_pb2_grpc.AgentRunnerStateServiceStub(channel).CreateSession(
            agent_runner_pb2.CreateSessionRequest(id=session, title="elsewhere")
        )
    stack.models.push(Turn.say("one"), Turn.say("two"))
    async with stack.client() as client:
        await chat(client, session, "a")
        await chat(client, session, "b")
    starts = [(r["sessionId"], r["detail"]["source"]) for r in stack.hook_requests("SessionStart")]
    assert starts == [(session, "create"), (session, "resume")]


async def test_a_denied_prompt_ends_the_turn_with_the_reason_and_no_model_call(stack: Stack) -> None:
    stack.receiver.script("/prompt", answer("deny", reason="no talk of the weather"))
    session, chunks = await chat_in_a_new_session(stack, "what's the weather?")
    assert shape(chunks) == finished_stream(
        text_step("This message was denied by a hook: no talk of the weather"), reason="other"
    )
    assert stack.models.requests == []
    [prompt] = stack.hook_requests("UserPromptSubmit")
    assert prompt["detail"] == {"prompt": "what's the weather?", "attachments": 0}
    # Nothing reaches the thread; the refusal is recorded as the turn's outcome.
    assert await thread_rows(stack, session) == []
    [event] = await turn_events(stack, session)
    assert (event.kind, event.failure_class) == ("failure", "hook_denied")


async def test_a_modified_prompt_replaces_the_text_and_keeps_attachments(stack: Stack) -> None:
    stack.receiver.script(
        "/prompt", answer("modify", replacement="Describe the picture.", additionalContext="Be brief.")
    )
    stack.models.push(Turn.say("A red dot."))
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n fake image").decode()
    message = user_message("firstline")
    message["parts"] += [
        {"type": "file", "mediaType": "image/png", "url": f"data:image/png;base64,{png}"},
        {"type": "text", "text": "secondline"},
    ]
    tag = uuid.uuid4().hex[:8]
    async with stack.client() as client:
        # Recall runs on the prompt the model gets: the replacement's words, not the original's.
        for memory in (f"The picture {tag} in the hallway is a red dot.", f"A firstline {tag} secondline memo."):
            assert (await client.post("/api/memories", json={"content": memory})).status_code == 201
        session = await new_session(client)
        chunks = await chat(client, session, message)
    assert text_of(chunks) == "A red dot."
    [request] = stack.models.requests
    user = request["messages"][-1]
    assert user["role"] == "user"
    assert user["content"] == [
        {"type": "text", "text": "Describe the picture."},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}},
    ]
    note = turn_note(request)
    assert "Be brief." in note
    assert f"The picture {tag} in the hallway is a red dot." in note
    assert "secondline" not in note
    [prompt] = stack.hook_requests("UserPromptSubmit")
    assert prompt["detail"] == {"prompt": "firstline\nsecondline", "attachments": 1}
    rows = await thread_rows(stack, session)
    assert rows[0][2]["ui"]["parts"] == [
        {"type": "text", "text": "Describe the picture."},
        message["parts"][1],
    ]


async def test_a_denied_tool_call_returns_the_reason_to_the_model(stack: Stack) -> None:
    stack.receiver.script("/pre-tool", answer("deny", reason="clocks are off limits"))
    stack.models.push(Turn.call(ToolCall("getTime", {}, id="call-1")), Turn.say("I cannot tell the time."))
    _, chunks = await chat_in_a_new_session(stack, "time?")
    assert shape(chunks)[:6] == [
        {"type": "start"},
        {"type": "start-step"},
        *tool_input("getTime", {}),
        {
            "type": "tool-output-error",
            "toolCallId": "c1",
            "errorText": "The getTime call was denied by a hook: clocks are off limits",
        },
        {"type": "finish-step"},
    ]
    assert text_of(chunks) == "I cannot tell the time."
    tool_message = stack.models.requests[1]["messages"][-1]
    assert tool_message["role"] == "tool" and "clocks are off limits" in tool_message["content"]
    # The tool never ran, so there is no post-tool event of either kind.
    assert stack.hook_requests("PostToolUse") == stack.hook_requests("PostToolUseFailure") == []


async def test_a_modified_tool_call_runs_with_the_replacement_arguments(stack: Stack) -> None:
    stack.receiver.script("/pre-tool", answer("modify", replacement={"time_zone": "Asia/Tokyo"}))
    stack.models.push(Turn.call(ToolCall("getTime", {"time_zone": "UTC"}, id="call-1")), Turn.say("Done."))
    _, chunks = await chat_in_a_new_session(stack, "time in UTC?")
    [tool_input] = of_type(chunks, "tool-input-available")
    [output] = of_type(chunks, "tool-output-available")
    assert tool_input["input"] == {"time_zone": "Asia/Tokyo"}
    assert output["output"]["timeZone"] == "Asia/Tokyo" and output["output"]["iso"].endswith("+09:00")
    [post] = stack.hook_requests("PostToolUse")
    assert post["detail"]["arguments"] == {"time_zone": "Asia/Tokyo"}


async def test_a_modified_tool_call_is_validated_again_by_the_tools_schema(stack: Stack) -> None:
    stack.receiver.script("/pre-tool", answer("modify", replacement={"time_zone": 42}))
    stack.models.push(Turn.call(ToolCall("getTime", {}, id="call-1")), Turn.say("Giving up."))
    _, chunks = await chat_in_a_new_session(stack, "time?")
    [error] = of_type(chunks, "tool-output-error")
    assert "Input should be a valid string" in error["errorText"]
    assert "Input should be a valid string" in stack.models.requests[1]["messages"][-1]["content"]
    assert stack.hook_requests("PostToolUse") == []


async def test_stop_continue_reruns_with_the_hooks_reason(stack: Stack) -> None:
    stops = iter([answer("continue", reason="Also say goodbye."), answer("pass")])
    stack.receiver.script("/stop", lambda request: next(stops))
    stack.models.push(Turn.say("Hello."), Turn.say("Goodbye."))
    session, chunks = await chat_in_a_new_session(stack, "greet me")
    assert shape(chunks) == finished_stream(text_step("Hello."), text_step("Goodbye.", part="t2"))
    assert conversation_of(stack.models.requests[1]) == [
        ("user", "greet me"),
        ("assistant", "Hello."),
        ("user", "Also say goodbye."),
    ]
    assert [(r["detail"]["response"], r["detail"]["retry"]) for r in stack.hook_requests("Stop")] == [
        ("Hello.", 0),
        ("Goodbye.", 1),
    ]
    rows = await thread_rows(stack, session)
    assert [p.get("text") for p in rows[1][2]["ui"]["parts"] if p["type"] == "text"] == ["Hello.", "Goodbye."]


async def test_stop_continue_is_capped_and_then_blocks_completion(stack: Stack) -> None:
    stack.receiver.script("/stop", answer("continue", reason="Not good enough."))
    stack.models.push(*(Turn.say(f"Attempt {n}.") for n in range(1, 5)))
    session, chunks = await chat_in_a_new_session(stack, "write a poem")
    # One run and maxProcessorRetries (3) re-runs, then completion is refused.
    assert len(stack.models.requests) == 4
    assert text_of(chunks) == "Attempt 1.Attempt 2.Attempt 3.Attempt 4."
    assert shape(chunks)[-3:] == [
        {"type": "finish-step"},
        {"type": "error", "errorText": "A Stop hook kept this turn from completing after 3 retries: Not good enough."},
        "[DONE]",
    ]
    assert len(stack.hook_requests("Stop")) == 4
    _, assistant = await recorded_turn(stack, session)
    assert assistant["metadata"]["failure"].startswith("A Stop hook kept this turn from completing")
    [event] = await turn_events(stack, session)
    assert (event.kind, event.failure_class) == ("failure", "stop_blocked")


async def test_a_failing_fail_closed_prompt_hook_denies(stack: Stack) -> None:
    stack.receiver.script("/prompt", Reply(status=500, raw_body=b"{}"))
    _, chunks = await chat_in_a_new_session(stack, "hi")
    assert stack.models.requests == []
    assert text_of(chunks).startswith("This message was denied by a hook:")


async def test_every_hook_request_of_a_turn_carries_its_turn_and_session_ids(stack: Stack) -> None:
    stack.models.push(Turn.call(ToolCall("getTime", {}, id="c")), Turn.say("ok"))
    session, chunks = await chat_in_a_new_session(stack, "time")
    turn_id = chunks[0]["messageMetadata"]["turnId"]
    seen = [(r.path, r.json()["turnId"], r.json()["sessionId"]) for r in stack.receiver.requests]
    # SessionStart came with the session's creation, before any turn: it carries no turn id.
    assert seen[0] == ("/session-start", None, session)
    assert [path for path, _, _ in seen[1:]] == ["/prompt", "/pre-tool", "/post-tool", "/stop"]
    assert {(t, s) for _, t, s in seen[1:]} == {(turn_id, session)}


async def test_hook_calls_emit_no_hooks_even_when_the_handlers_fail(stack: Stack) -> None:
    # Hook calls never emit hooks (docs/hooks.md): not as tool calls of their own, and a handler that
    # fails is logged and audited, never reported as a PostToolUseFailure or StopFailure.
    stack.receiver.script("/session-start", Reply(status=200, raw_body=b"not json"))
    stack.receiver.script("/post-tool", Reply(status=500, raw_body=b"{}"))
    stack.receiver.script("/subagent-stop", Reply(status=500, raw_body=b"{}"))
    stack.models.push(
        Turn.call(ToolCall("researcher", {"brief": "Find the time."}, id="c-d")),
        Turn.call(ToolCall("getTime", {}, id="c-t")),
        Turn.say("It is noon."),
        Turn.say("Noon."),
    )
    session, chunks = await chat_in_a_new_session(stack, "what time is it?")
    assert text_of(chunks) == "Noon."
    received = [(r.path, r.json()) for r in stack.receiver.requests]
    # Exactly the dispatches of the turn's own steps, each once, in order.
    assert [path for path, _ in received] == [
        "/session-start",
        "/prompt",
        "/pre-tool",
        "/subagent-start",
        "/pre-tool",
        "/post-tool",
        "/subagent-stop",
        "/post-tool",
        "/stop",
    ]
    assert [(body["toolCallId"], body["detail"]["toolName"]) for path, body in received if path == "/pre-tool"] == [
        ("c-d", "researcher"),
        ("c-t", "getTime"),
    ]
    # No event names a hook call: nothing the hooks service sent is the subject of another dispatch.
    assert not any(stack.receiver.url("/") in str(body) for _, body in received)
    async with stack.client() as client:
        runs = (await client.get(f"/api/sessions/{session}/hooks")).json()["runs"]
    assert sorted(run["event"] for run in runs) == sorted(
        [
            "SessionStart",
            "UserPromptSubmit",
            "PreToolUse",
            "SubagentStart",
            "PreToolUse",
            "PostToolUse",
            "SubagentStop",
            "PostToolUse",
            "Stop",
        ]
    )
    # The failures are audited as what they are, on the events whose handlers failed (failing open).
    failed = sorted((run["event"], run["failureClass"]) for run in runs if run["failureClass"])
    assert failed == [
        ("PostToolUse", "transport"),
        ("PostToolUse", "transport"),
        ("SessionStart", "malformed_response"),
        ("SubagentStop", "transport"),
    ]
