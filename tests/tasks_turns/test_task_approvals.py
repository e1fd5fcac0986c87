"""A task turn whose tool call asks for an approval (docs/approvals.md) waits for it as a chat turn
does: the task shows `waitingForApproval`, its attempt timeout does not run while it waits (neither
the worker's nor agent-runner's own turn deadline), and an approval, a denial or the approval's
expiry (a denial) lets the task end.

The stack's attempt timeout is 2.5 s (what a turn takes besides its wait, a cold first turn included)
and its abort acknowledgement half a second, so agent-runner's turn deadline is 4 s (timeout +
acknowledgement + 1 s); a test that waits 4.5 s for a person is past both. Approvals expire after 7 s
here."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest

from support.model_gateway import ToolCall, Turn
from support.stacks import TASK_HOOK_PATHS, TASK_RUNTIME, Stack, StackSpec
from support.waiting import eventually

RUN = "mastra_workspace_execute_command"
APPROVAL_TIMEOUT_S = 7
# Longer than the attempt timeout and agent-runner's turn deadline, shorter than the approval's expiry.
PERSON_S = 4.5

# One stack, on one worker, for the three tests.
pytestmark = pytest.mark.xdist_group("task-approvals")

TASK_APPROVAL_STACK = StackSpec(
    "task_approvals",
    TASK_HOOK_PATHS,
    frozenset({"tasks", "gateway"}),
    runtime={**TASK_RUNTIME, "task_attempt_timeout_ms": 2500, "task_abort_ack_timeout_ms": 500},
    runner_settings={"POPAGENT_APPROVAL_TIMEOUT_S": str(APPROVAL_TIMEOUT_S)},
)


@pytest.fixture
async def stack(started_stack: Callable[[StackSpec], Awaitable[Stack]]) -> Stack:
    approval_stack = await started_stack(TASK_APPROVAL_STACK)
    approval_stack.reset()
    return approval_stack


@contextlib.asynccontextmanager
async def shell_asks(client: httpx.AsyncClient) -> AsyncIterator[None]:
    """The supervisor's policy asks before every shell command; its rules as they were afterwards."""
    before = await client.get("/api/agents")
    assert before.status_code == 200, before.text
    [supervisor] = [agent for agent in before.json()["agents"] if agent["id"] == "popagent"]
    # As written: an answer names every field of a rule, null where it has none.
    rules = [
        {key: value for key, value in rule.items() if value not in (None, {})} for rule in supervisor["toolApproval"]
    ]
    changed = await client.patch("/api/agents/popagent", json={"toolApproval": [{"tool": RUN, "decision": "ask"}]})
    assert changed.status_code == 200, changed.text
    try:
        yield
    finally:
        restored = await client.patch("/api/agents/popagent", json={"toolApproval": rules})
        assert restored.status_code == 200, restored.text


async def task_of(client: httpx.AsyncClient, task_id: str) -> dict[str, Any]:
    response = await client.get(f"/api/tasks/{task_id}")
    assert response.status_code == 200, response.text
    return dict(response.json())


async def waiting_task(client: httpx.AsyncClient, task_id: str) -> dict[str, Any]:
    return await eventually(
        lambda: task_of(client, task_id),
        until=lambda task: task["waitingForApproval"] is not None,
        within=20,
        what="the task to wait for an approval",
    )


async def pending_approval(client: httpx.AsyncClient, thread_id: str) -> dict[str, Any]:
    response = await client.get("/api/approvals", params={"state": "pending", "sessionId": thread_id})
    assert response.status_code == 200, response.text
    [approval] = response.json()["approvals"]
    return dict(approval)


def marker(stack: Stack) -> tuple[str, Any]:
    """A file name only this test's command writes, in the tasks' workspace, and its path."""
    name = f"ran-{uuid.uuid4().hex[:8]}.txt"
    return name, stack.workspace_root / "popagent" / name


def tool_results(stack: Stack) -> list[str]:
    """What the model read back from tool calls, in its last request."""
    return [m["content"] for m in stack.models.requests[-1]["messages"] if m["role"] == "tool"]


async def start_waiting(stack: Stack, client: httpx.AsyncClient, name: str) -> tuple[str, dict[str, Any]]:
    """A task whose model runs one shell command; returns it once it waits, with its approval."""
    stack.models.push(
        Turn.call(ToolCall(RUN, {"command": f"echo ran >> {name}"}, id="sh1")),
        Turn.say("All done."),
    )
    task_id = await stack.create_task("Run the command", max_attempts=1)
    task = await waiting_task(client, task_id)
    assert task["status"] == "running"
    approval = await pending_approval(client, task["threadId"])
    assert (approval["toolName"], approval["toolCallId"], approval["turnId"]) == (RUN, "sh1", task["turnId"])
    assert task["waitingForApproval"]["approvalId"] == approval["id"]
    assert task["waitingForApproval"]["toolName"] == RUN
    return task_id, approval


async def test_a_task_waits_for_its_approval_past_its_timeout_and_the_approved_call_runs_once(stack: Stack) -> None:
    name, ran = marker(stack)
    async with stack.client() as client, shell_asks(client):
        task_id, approval = await start_waiting(stack, client, name)
        waited_from = time.monotonic()
        # Longer than the attempt timeout and agent-runner's turn deadline: the task waits on.
        while True:
            task = await task_of(client, task_id)
            assert task["status"] == "running", task
            assert task["attemptCount"] == 1
            assert task["waitingForApproval"]["approvalId"] == approval["id"]
            if time.monotonic() - waited_from > PERSON_S:
                break
            await asyncio.sleep(0.5)
        assert not ran.exists(), "the call ran before it was approved"
        assert len(stack.models.requests) == 1
        assert any(p["message"] == f"waiting for approval: {RUN}" for p in task["progress"]), task["progress"]
        answered = await client.post(f"/api/approvals/{approval['id']}", json={"decision": "approve"})
        assert answered.status_code == 200, answered.text
        done = await stack.wait_task(task_id, "completed", "failed", "dead-letter", "cancelled")
        assert (done.status, done.attempt_count, done.outcome) == ("completed", 1, "All done."), done.last_error
        assert not done.HasField("waiting_for_approval")
        assert (await task_of(client, task_id))["waitingForApproval"] is None
    assert ran.read_text() == "ran\n"
    [result] = tool_results(stack)
    assert "denied" not in result and "not approved" not in result
    messages = [p.message for p in done.progress]
    assert messages.index(f"waiting for approval: {RUN}") < messages.index(f"approved: {RUN}")


async def test_a_denied_task_call_never_runs_and_the_model_reads_the_reason(stack: Stack) -> None:
    name, ran = marker(stack)
    async with stack.client() as client, shell_asks(client):
        task_id, approval = await start_waiting(stack, client, name)
        denied = await client.post(
            f"/api/approvals/{approval['id']}", json={"decision": "deny", "reason": "not on a Friday"}
        )
        assert denied.status_code == 200, denied.text
        done = await stack.wait_task(task_id, "completed", "failed", "dead-letter", "cancelled")
        assert (done.status, done.outcome) == ("completed", "All done."), done.last_error
        assert (await task_of(client, task_id))["waitingForApproval"] is None
    assert not ran.exists()
    [result] = tool_results(stack)
    assert "denied" in result and "not on a Friday" in result
    assert f"denied: {RUN}" in [p.message for p in done.progress]


async def test_an_approval_that_expires_counts_as_denied_and_the_task_ends(stack: Stack) -> None:
    name, ran = marker(stack)
    async with stack.client() as client, shell_asks(client):
        started = time.monotonic()
        task_id, approval = await start_waiting(stack, client, name)
        done = await stack.wait_task(
            task_id, "completed", "failed", "dead-letter", "cancelled", within=APPROVAL_TIMEOUT_S + 10
        )
        assert time.monotonic() - started >= APPROVAL_TIMEOUT_S - 1
        assert (done.status, done.outcome) == ("completed", "All done."), done.last_error
        listed = await client.get("/api/approvals", params={"sessionId": done.thread_id})
        assert [(a["id"], a["state"]) for a in listed.json()["approvals"]] == [(approval["id"], "expired")]
        late = await client.post(f"/api/approvals/{approval['id']}", json={"decision": "approve"})
        assert late.status_code == 409, late.text
    assert not ran.exists()
    [result] = tool_results(stack)
    assert "not approved in time" in result
