"""Tool approvals with the real ai 5 client (docs/approvals.md, Answering), which has neither approval chunk:
told its major (`x-popagent-ai-sdk: 5`), the stream shows the request as a text part saying what waits
and how to answer it, and ends there cleanly; the answer goes through POST /api/approvals/{id}; an ai 5
client that resumes the turn sees the rest, a denial as the call's tool error. Nothing is stored
differently: the stored message is the one an ai 6 client gets."""

from __future__ import annotations

from typing import Any

import pytest

from chat.approvals import answer_approval, pending, supervisor_policy, workspace
from chat.helpers import recorded_turn
from support.ai_sdk_client import run_ai_sdk_chat, run_ai_sdk_resume
from support.model_gateway import ToolCall, Turn
from support.stacks import API_KEY, Stack

RUN = "mastra_workspace_execute_command"
COMMAND = "echo ran >> count.txt"


def slow(text: str) -> Turn:
    """The answer after the call: slow enough (about 5 s) that a client started after the answer, a node
    process, resumes the turn while it still runs (a finished turn is not followed: 204)."""
    return Turn.say(text, first_byte_delay_s=1.5, chunk_size=2, chunk_delay_s=0.3)


def texts(message: dict[str, Any]) -> list[str]:
    return [part["text"] for part in message["parts"] if part["type"] == "text"]


def tool_part(message: dict[str, Any]) -> dict[str, Any]:
    [part] = [part for part in message["parts"] if part.get("toolCallId") == "x1"]
    return part


async def asked_through_ai5(stack: Stack, session: str) -> tuple[dict[str, Any], str]:
    """The ai 5 client sends a message whose turn asks: its stream ends cleanly where the turn waits, the
    message saying what waits and how to answer. Returns the assistant message and the approval's id."""
    result = await run_ai_sdk_chat(stack.url, API_KEY, session, "count", package="ai5", workspace_id="")
    assert (result["status"], result["errors"]) == ("ready", []), result
    assert [(r["method"], r["status"]) for r in result["requests"]] == [("POST", 200)]
    user, assistant = result["messages"]
    assert user["role"] == "user" and assistant["role"] == "assistant"
    assert assistant["metadata"]["awaitingApproval"] is True
    part = tool_part(assistant)
    assert (part["type"], part["state"], part["input"]) == (f"tool-{RUN}", "input-available", {"command": COMMAND})
    async with stack.client() as client:
        [approval] = await pending(client, session)
    [said] = texts(assistant)
    for words in (RUN, "(call x1)", approval["reason"], f"Approval id: {approval['id']}", "popagent UI"):
        assert words in said, (words, said)
    assert f"POST /api/approvals/{approval['id']}" in said
    return assistant, approval["id"]


@pytest.mark.timeout(120)
async def test_an_ai5_client_sees_the_approval_as_text_and_the_turn_goes_on_once_approved_through_the_api(
    stack: Stack,
) -> None:
    stack.models.push(Turn.call(ToolCall(RUN, {"command": COMMAND}, id="x1")), slow("Counted it once."))
    async with stack.client() as client, supervisor_policy(client, [{"tool": RUN, "decision": "ask"}]):
        session, repo = await workspace(stack, client)
        asked, approval_id = await asked_through_ai5(stack, session)
        assert not (repo / "count.txt").exists()
        await answer_approval(client, approval_id, "approve")
        resumed = await run_ai_sdk_resume("ai5", stack.url, API_KEY, session)
    assert (resumed["status"], resumed["errors"]) == ("ready", []), resumed
    assert [(r["method"], r["status"]) for r in resumed["requests"]] == [("GET", 200)]
    [message] = resumed["messages"]
    assert message["id"] == asked["id"]
    # The turn replayed from its start: the request's text, the call's output, then the answer.
    said = texts(message)
    assert len(said) == 2 and approval_id in said[0] and said[1] == "Counted it once."
    part = tool_part(message)
    assert part["state"] == "output-available"
    # The call ran once.
    assert (repo / "count.txt").read_text() == "ran\n"
    await stored_as_for_ai6(stack, session, approval_id, approved=True)


@pytest.mark.timeout(120)
async def test_an_ai5_client_resuming_a_turn_denied_through_the_api_sees_the_call_s_tool_error(stack: Stack) -> None:
    stack.models.push(Turn.call(ToolCall(RUN, {"command": COMMAND}, id="x1")), slow("Left it alone."))
    async with stack.client() as client, supervisor_policy(client, [{"tool": RUN, "decision": "ask"}]):
        session, repo = await workspace(stack, client)
        _, approval_id = await asked_through_ai5(stack, session)
        await answer_approval(client, approval_id, "deny", "not on a friday")
        resumed = await run_ai_sdk_resume("ai5", stack.url, API_KEY, session)
    assert (resumed["status"], resumed["errors"]) == ("ready", []), resumed
    [message] = resumed["messages"]
    part = tool_part(message)
    assert part["state"] == "output-error"
    assert part["errorText"].startswith(f"Denied (approval {approval_id}): ")
    assert "denied" in part["errorText"] and "not on a friday" in part["errorText"]
    assert texts(message)[-1] == "Left it alone."
    assert not (repo / "count.txt").exists()
    await stored_as_for_ai6(stack, session, approval_id, approved=False)


async def stored_as_for_ai6(stack: Stack, session: str, approval_id: str, *, approved: bool) -> None:
    """The stored message is the turn's own, whatever major followed it: no text of the request, the
    tool part with its approval."""
    _, stored = await recorded_turn(stack, session)
    assert not any(approval_id in text for text in texts(stored))
    part = tool_part(stored)
    assert part["approval"]["id"] == approval_id and part["approval"]["approved"] is approved
    assert part["state"] == ("output-available" if approved else "output-denied")
