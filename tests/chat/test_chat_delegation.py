"""Delegation from the supervisor to each specialist: isolated runs, bounded results, telemetry, hooks."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from chat.helpers import (
    chat,
    chat_in_a_new_session,
    finished_stream,
    new_session,
    of_type,
    runtime_settings,
    shape,
    text_of,
    text_step,
    thread_rows,
    tool_input,
)
from support.https_receiver import answer
from support.model_gateway import ToolCall, Turn, Usage
from support.stacks import MODEL, SPECIALISTS, Stack

# The seeded profiles inherit the turn's route; the reviewer's is given an override (the 9Router
# preset's, which the stack's catalog lists) for the test, so both ways are run.
OVERRIDE = "cx/gpt-5.3-codex-spark"
SPECIALIST_MODEL = {"researcher": MODEL, "implementer": MODEL, "reviewer": OVERRIDE}


@contextlib.asynccontextmanager
async def profile_model(stack: Stack, specialist: str) -> AsyncIterator[None]:
    """The specialist's persisted model override set to SPECIALIST_MODEL's where that is not the route."""
    if SPECIALIST_MODEL[specialist] == MODEL:
        yield
        return
    async with stack.client() as client:
        patched = await client.patch(f"/api/agents/{specialist}", json={"model": SPECIALIST_MODEL[specialist]})
        assert patched.status_code == 200, patched.text
        try:
            yield
        finally:
            assert (await client.patch(f"/api/agents/{specialist}", json={"model": None})).status_code == 200


# The seeded memberships (data migrations 0004-0006, 0009): every role searches the web and the
# workspace's documentation, the researcher also fetches.
SPECIALIST_TOOLS = {
    "researcher": ["getTime", "webSearch", "webFetch", "searchDocs"],
    "implementer": ["getTime", "webSearch", "searchDocs"],
    "reviewer": ["getTime", "webSearch", "searchDocs"],
}


def tool_names(request: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in request.get("tools", [])]


@pytest.mark.parametrize("specialist", SPECIALISTS)
async def test_a_delegation_runs_the_specialist_and_returns_only_its_text(stack: Stack, specialist: str) -> None:
    stack.models.push(
        Turn.call(ToolCall(specialist, {"brief": f"Please do the {specialist} part."}, id="call-d")),
        # The specialist uses a tool of its own before it answers: that must stay out of the supervisor's view.
        Turn.call(ToolCall("getTime", {}, id="call-inner")),
        Turn.say(f"{specialist} findings: all good."),
        Turn.say("Summary for the user.", chunk_size=100),
    )
    async with profile_model(stack, specialist):
        session, chunks = await chat_in_a_new_session(stack, "do the work")

    assert shape(chunks) == finished_stream(
        [
            {"type": "start-step"},
            *tool_input(specialist, {"brief": f"Please do the {specialist} part."}),
            {"type": "data-agentActivity", "id": "a1", "status": "running"},
            {"type": "data-agentActivity", "id": "a1", "status": "running"},
            {"type": "data-agentActivity", "id": "a1", "status": "running"},
            {"type": "data-agentActivity", "id": "a1", "status": "completed"},
            {"type": "tool-output-available", "toolCallId": "c1", "output": f"{specialist} findings: all good."},
            {"type": "finish-step"},
        ],
        text_step("Summary for the user."),
    )
    supervisor_first, specialist_first, specialist_second, supervisor_second = stack.models.requests
    # The supervisor is offered every delegation-eligible specialist; the specialist none of them.
    assert set(SPECIALISTS) <= set(tool_names(supervisor_first))
    assert not set(SPECIALISTS) & set(tool_names(specialist_first))
    # Its membership, then the workspace tools of its persisted access, then the skill tools (it has seeded skills).
    workspace = [name for name in tool_names(specialist_first) if name.startswith("mastra_workspace_")]
    skill_tools = ["skill", "skill_read", "skill_search"]
    assert tool_names(specialist_first)[-3:] == skill_tools
    others = [name for name in tool_names(specialist_first) if name not in workspace and name not in skill_tools]
    assert others == SPECIALIST_TOOLS[specialist]
    # The file (and, for the implementer, shell) tools, plus mastra_workspace_lsp_inspect (every role).
    assert len(workspace) == (11 if specialist == "implementer" else 4) + 1
    # Each agent on its own model: a profile override, or the turn's route (never the server default).
    assert supervisor_first["model"] == MODEL
    assert specialist_first["model"] == SPECIALIST_MODEL[specialist]
    specialist_system = "\n".join(m["content"] for m in specialist_first["messages"] if m["role"] == "system")
    assert specialist_system.startswith(f"You are the {specialist}")
    # An isolated thread: the brief (with a slice of the conversation), no supervisor history.
    user_messages = [m for m in specialist_first["messages"] if m["role"] == "user"]
    assert len(user_messages) == 1
    assert user_messages[0]["content"].startswith(f"Please do the {specialist} part.")
    assert "User: do the work" in user_messages[0]["content"]
    assert [m["role"] for m in specialist_second["messages"] if m["role"] != "system"] == ["user", "assistant", "tool"]
    # Only the specialist's text reaches the supervisor: no nested tool call, no payload.
    tool_result = supervisor_second["messages"][-1]
    assert (tool_result["role"], tool_result["content"]) == ("tool", f"{specialist} findings: all good.")
    assert "call-inner" not in str(supervisor_second)

    activity = of_type(chunks, "data-agentActivity")[-1]["data"]
    assert activity["agentId"] == specialist
    assert activity["status"] == "completed"
    assert activity["model"] == SPECIALIST_MODEL[specialist]
    assert [(i["step"], i["toolCalls"]) for i in activity["iterations"]] == [(1, ["getTime"]), (2, [])]
    assert activity["iterations"][1]["preview"] == f"{specialist} findings: all good."
    assert activity["truncated"] is False

    [start] = stack.hook_requests("SubagentStart")
    [stop] = stack.hook_requests("SubagentStop")
    assert start["detail"] == {"agentId": specialist, "prompt": f"Please do the {specialist} part."}
    assert (stop["detail"]["status"], stop["detail"]["response"]) == ("completed", f"{specialist} findings: all good.")
    # PreToolUse also ran inside the specialist, for its own tool, under the same turn.
    assert [(r["detail"]["toolName"], r["detail"]["agent"]) for r in stack.hook_requests("PreToolUse")] == [
        (specialist, "popagent"),
        ("getTime", specialist),
    ]

    # The reopened session keeps the delegation evidence; the specialist's run is on its own thread.
    rows = await thread_rows(stack, session)
    parts = rows[1][2]["ui"]["parts"]
    assert [p["type"] for p in parts] == [
        "step-start",
        f"tool-{specialist}",
        "data-agentActivity",
        "step-start",
        "text",
    ]
    assert parts[2]["data"] == activity
    specialist_rows = await thread_rows(stack, activity["threadId"])
    assert [(row_id, role) for row_id, role, _ in specialist_rows] == [("prompt", "user"), ("answer", "assistant")]
    async with stack.db() as conn:
        parent = await conn.fetchval("SELECT parent_id FROM popagent_threads WHERE id = $1", activity["threadId"])
    assert parent == session


async def test_a_denied_delegation_tells_the_supervisor_and_never_runs_the_specialist(stack: Stack) -> None:
    stack.receiver.script("/subagent-start", answer("deny", reason="no research today"))
    stack.models.push(Turn.call(ToolCall("researcher", {"brief": "look"}, id="d")), Turn.say("I will do it myself."))
    _, chunks = await chat_in_a_new_session(stack, "research")
    assert len(stack.models.requests) == 2
    [error] = of_type(chunks, "tool-output-error")
    assert error["errorText"] == "Delegation to researcher was denied by a hook: no research today"
    assert of_type(chunks, "data-agentActivity")[-1]["data"]["status"] == "denied"
    assert stack.hook_requests("SubagentStop") == []


async def test_a_modified_delegation_brief_is_what_the_specialist_gets(stack: Stack) -> None:
    stack.receiver.script("/subagent-start", answer("modify", replacement="A safer brief."))
    stack.models.push(
        Turn.call(ToolCall("reviewer", {"brief": "original brief"}, id="d")), Turn.say("ok"), Turn.say("done")
    )
    async with stack.client() as client:
        session = await new_session(client)
        await chat(client, session, "review")
    specialist = stack.models.requests[1]
    assert next(m["content"] for m in specialist["messages"] if m["role"] == "user").startswith("A safer brief.")


async def test_a_failed_delegation_returns_the_persisted_failure_feedback(stack: Stack) -> None:
    stack.models.push(
        Turn.call(ToolCall("implementer", {"brief": "build it"}, id="d")),
        Turn.fail(503, "implementer model down"),
        Turn.say("The implementer failed; here is what I can say."),
    )
    _, chunks = await chat_in_a_new_session(stack, "implement")
    [error] = of_type(chunks, "tool-output-error")
    assert error["errorText"].startswith("The specialist could not complete this delegation.")
    assert "implementer" in error["errorText"]
    assert text_of(chunks) == "The implementer failed; here is what I can say."
    assert chunks[-2]["type"] == "finish"
    activity = of_type(chunks, "data-agentActivity")[-1]["data"]
    assert (activity["status"], activity["errorClass"]) == ("failed", "unavailable")
    [stop] = stack.hook_requests("SubagentStop")
    assert (stop["detail"]["status"], stop["detail"]["errorClass"]) == ("failed", "unavailable")
    # A specialist failure is not a turn failure.
    assert stack.hook_requests("StopFailure") == []


async def test_delegation_results_and_context_are_bounded_by_the_snapshot(stack: Stack) -> None:
    long_answer = "".join(f"{n:04d}" for n in range(100))  # 400 characters
    async with (
        stack.client() as client,
        runtime_settings(client, delegationResultMaxChars=256, delegationContextMaxChars=18),
    ):
        stack.models.push(
            Turn.call(ToolCall("researcher", {"brief": "look"}, id="d")),
            Turn.say(long_answer),
            Turn.say("done"),
        )
        session = await new_session(client)
        await chat(client, session, "please research the thing")
    specialist = stack.models.requests[1]
    prompt = next(m["content"] for m in specialist["messages"] if m["role"] == "user")
    # The latest 18 characters of "User: please research the thing".
    assert prompt.startswith("look\n") and prompt.endswith("for context only:\nresearch the thing")
    tool_result = stack.models.requests[2]["messages"][-1]["content"]
    assert tool_result == (
        long_answer[:256] + "\n\n[The specialist response was truncated to the configured delegation result bound.]"
    )


async def test_deleting_the_session_removes_its_specialist_threads(stack: Stack) -> None:
    stack.models.push(Turn.call(ToolCall("reviewer", {"brief": "check"}, id="d")), Turn.say("fine"), Turn.say("ok"))
    async with stack.client() as client:
        session = await new_session(client)
        chunks = await chat(client, session, "review")
        thread_id = of_type(chunks, "data-agentActivity")[-1]["data"]["threadId"]
        assert await thread_rows(stack, thread_id)
        assert (await client.delete(f"/api/sessions/{session}")).status_code == 204
    assert await thread_rows(stack, thread_id) == []
    assert await thread_rows(stack, session) == []


async def test_a_delegation_turn_behind_9router_reports_the_upstreams_real_token_counts(stack: Stack) -> None:
    # 9Router adds 2000 to a non-streamed answer's prompt tokens: every request of the turn, the
    # specialist's too, must stream, so the figures are the upstream's own usage chunk.
    stack.models.push(
        Turn.call(ToolCall("researcher", {"brief": "Look it up."}, id="call-d"), usage=Usage(40, 6)),
        Turn.say("researcher findings.", usage=Usage(30, 4)),
        Turn.say("Summary for the user.", usage=Usage(50, 2)),
    )
    stack.models.ninerouter_usage = True
    try:
        session, chunks = await chat_in_a_new_session(stack, "find out")
    finally:
        stack.models.ninerouter_usage = False

    assert [request["stream"] for request in stack.models.requests] == [True, True, True]
    real = {"inputTokens": 40 + 30 + 50, "outputTokens": 6 + 4 + 2}
    assert chunks[-2]["messageMetadata"]["usage"] == real
    completed = of_type(chunks, "data-agentActivity")[-1]["data"]
    assert completed["status"] == "completed"
    assert completed["usage"] == {"inputTokens": 30, "outputTokens": 4, "requests": 1}
    rows = await thread_rows(stack, session)
    assert rows[-1][2]["ui"]["metadata"]["usage"] == real
