"""A chat turn that stops for a tool approval: a client that can answer elicitations at 2026-07-28 is
asked inside the call's result (InputRequiredResult, answered by calling again: the stateless server
cannot send requests to the client), its answer is taken as POST /api/approvals/{id} takes it and the
turn goes on to its answer; any other client is answered that the turn waits, with the approval id."""

from __future__ import annotations

from typing import Any

import pytest
from mcp.client.context import ClientRequestContext
from mcp_types import ElicitRequestFormParams, ElicitRequestParams, ElicitResult

from mcp_server.helpers import BEARER, HANDSHAKE, answer_of, asking_before, asking_client, connected
from support.model_gateway import ToolCall, Turn
from support.stacks import MODEL, Stack
from support.waiting import eventually

ANSWERS = {
    "allow": ({"decision": "allow"}, ("approved", "once", None)),
    "allow-for-session": ({"decision": "allow for this session"}, ("approved", "session", None)),
    "deny": ({"decision": "deny", "reason": "not during the freeze"}, ("denied", None, "not during the freeze")),
}


async def approvals_of(stack: Stack, session_id: str) -> list[dict[str, Any]]:
    async with stack.client() as client:
        listed = await client.get("/api/approvals", params={"sessionId": session_id})
    return listed.json()["approvals"]


async def approved_elsewhere(stack: Stack, approval_id: str, session_id: str) -> None:
    """Approve through the API, as the UI does, and wait for the turn's answer: a turn left running
    would take the next test's scripted answer."""
    async with stack.client() as client:
        answered = await client.post(f"/api/approvals/{approval_id}", json={"decision": "approve"})
        assert answered.status_code == 200, answered.text

        async def transcript() -> str:
            return (await client.get(f"/api/sessions/{session_id}/export")).text

        await eventually(transcript, until=lambda text: "It is noon." in text, within=20.0, what="the answer")


@pytest.mark.parametrize("answer", ANSWERS)
async def test_a_client_that_can_answer_is_asked_and_the_turn_goes_on_to_its_answer(stack: Stack, answer: str) -> None:
    content, (state, scope, answer_reason) = ANSWERS[answer]
    stack.models.push(Turn.call(ToolCall("getTime", {}, id="t1")), Turn.say("Done with the clock."))
    asked: list[ElicitRequestParams] = []
    notes: list[str] = []

    async def answering(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        asked.append(params)
        return ElicitResult(action="accept", content=content)

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        notes.append(message or "")

    async with asking_before(stack, "getTime"), asking_client(stack, answering) as client:
        prompt = {"prompt": "What time is it?", "model": MODEL}
        outcome = answer_of(await client.call_tool("chat", prompt, progress_callback=on_progress))
    assert (outcome["status"], outcome["answer"]) == ("completed", "Done with the clock.")
    # The answer after the approval arrived as progress too (on the call that carried the answer).
    assert "".join(notes) == "Done with the clock."
    [approval] = await approvals_of(stack, outcome["sessionId"])
    [question] = asked
    assert isinstance(question, ElicitRequestFormParams)
    assert approval["reason"] and question.message == f"Allow getTime ({approval['reason']})?"
    schema = question.requested_schema
    assert schema["properties"]["decision"]["enum"] == ["allow", "allow for this session", "deny"]
    assert schema["required"] == ["decision"]
    assert (approval["state"], approval["scope"], approval["answerReason"]) == (state, scope, answer_reason)
    # The model went on from the call's outcome: the tool's result, or the denial with its reason.
    tool_messages = [m for m in stack.models.requests[-1]["messages"] if m.get("role") == "tool"]
    assert tool_messages, stack.models.requests[-1]["messages"]
    assert ("not during the freeze" in str(tool_messages)) == (answer == "deny")


async def test_a_declined_question_leaves_the_approval_waiting_and_the_answer_says_so(stack: Stack) -> None:
    stack.models.push(Turn.call(ToolCall("getTime", {}, id="t1")), Turn.say("It is noon."))
    asked: list[ElicitRequestParams] = []

    async def declining(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        asked.append(params)
        return ElicitResult(action="decline")

    async with asking_before(stack, "getTime"), asking_client(stack, declining) as client:
        outcome = answer_of(await client.call_tool("chat", {"prompt": "What time is it?", "model": MODEL}))
    # Asked once, not again: the call answers that the turn waits.
    assert len(asked) == 1
    assert outcome["status"] == "waiting-for-approval"
    [waiting] = outcome["approvals"]
    [approval] = await approvals_of(stack, outcome["sessionId"])
    assert (approval["id"], approval["state"]) == (waiting["approvalId"], "pending")
    # The turn ends with the answer given elsewhere.
    await approved_elsewhere(stack, approval["id"], outcome["sessionId"])


async def test_a_handshake_era_client_is_answered_with_the_approval_id_even_when_it_can_elicit(stack: Stack) -> None:
    """At 2025-11-25 asking is a request to the client, which the stateless transport cannot send."""
    stack.models.push(Turn.call(ToolCall("getTime", {}, id="t1")), Turn.say("It is noon."))
    asked: list[ElicitRequestParams] = []

    async def answering(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        asked.append(params)
        return ElicitResult(action="accept", content={"decision": "allow"})

    async with asking_before(stack, "getTime"), connected(stack, BEARER, HANDSHAKE, answering) as session:
        outcome = answer_of(await session.call_tool("chat", {"prompt": "What time is it?", "model": MODEL}))
    assert (outcome["status"], asked) == ("waiting-for-approval", [])
    [waiting] = outcome["approvals"]
    assert waiting["toolName"] == "getTime"
    await approved_elsewhere(stack, waiting["approvalId"], outcome["sessionId"])
