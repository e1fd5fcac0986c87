"""Background tasks run as agent turns: real hooks, agent-runner and tasks services, the
scripted model server over HTTP, hook deliveries checked at a real HTTPS receiver."""

from __future__ import annotations

import time

import pytest

from popagent.agent_runner.v1 import agent_runner_pb2 as arpb
from popagent.tasks.v1 import tasks_pb2 as tpb
from support.git_fixtures import git_workspace, self_update_task
from support.https_receiver import answer
from support.model_gateway import ToolCall, Turn
from support.stacks import Stack
from support.waiting import eventually


def prompt_of(body: dict) -> str:  # type: ignore[type-arg]
    """The last user message's text the model was sent."""
    users = [m for m in body["messages"] if m["role"] == "user"]
    content = users[-1]["content"]
    return content if isinstance(content, str) else " ".join(p.get("text", "") for p in content)


def stops_of(stack: Stack, task_id: str) -> list[dict]:  # type: ignore[type-arg]
    return [r for r in stack.hook_requests("TaskStop") if r["detail"]["taskId"] == task_id]


async def settled_remediation(stack: Stack, task_id: str, workspace_id: str = "popagent") -> tpb.Task:
    """The one remediation of a failed task, once it has ended (so no later test sees its turn)."""
    listed = await stack.tasks.ListTasks(tpb.ListTasksRequest(workspace_id=workspace_id))
    remediations = [t for t in listed.tasks if t.parent_task_id == task_id]
    assert [t.kind for t in remediations] == ["remediation"]
    return await stack.wait_task(remediations[0].id, "completed", "failed", "dead-letter", "cancelled")


async def test_a_user_task_runs_as_a_turn_and_completes_with_the_answer(stack: Stack) -> None:
    stack.models.push(Turn.say("The build is green."))
    task_id = await stack.create_task("Check the build status")
    task = await stack.wait_task(task_id, "completed", "failed", "dead-letter")
    assert task.status == "completed"
    assert task.outcome == "The build is green."
    assert task.attempt_count == 1
    [request] = stack.models.requests
    assert prompt_of(request) == "Check the build status"
    # The turn's hooks and the task's lifecycle share one turn id, the task's.
    [start] = stack.hook_requests("TaskStart")
    [stop] = stack.hook_requests("TaskStop")
    [prompt] = stack.hook_requests("UserPromptSubmit")
    [final] = stack.hook_requests("Stop")
    assert start["turnId"] == stop["turnId"] == prompt["turnId"] == final["turnId"] == task.turn_id
    # A task is not a chat session opening.
    assert stack.hook_requests("SessionStart") == []
    # The worker's timing came from agent-runner's settings, not the tasks env defaults (10).
    assert stack.running.worker is not None and stack.running.worker.config.concurrency == 4


async def test_a_task_turn_calls_tools_through_the_same_hooks_and_reports_progress(stack: Stack) -> None:
    stack.models.push(
        Turn.call(ToolCall("getTime", {"time_zone": "UTC"}, id="call-time")),
        Turn.say("It is late."),
    )
    task_id = await stack.create_task("What time is it?")
    task = await stack.wait_task(task_id, "completed", "failed", "dead-letter")
    assert (task.status, task.outcome) == ("completed", "It is late.")
    [pre] = stack.hook_requests("PreToolUse")
    [post] = stack.hook_requests("PostToolUse")
    assert pre["turnId"] == post["turnId"] == task.turn_id
    assert pre["toolCallId"] == "call-time"
    # The tool result went back to the model.
    assert stack.models.requests[1]["messages"][-1]["role"] == "tool"
    progress = [(p.kind, p.message) for p in task.progress]
    assert ("progress", "tool getTime") in progress


@pytest.mark.parametrize(("status", "error_class"), [(500, "provider"), (429, "rate_limit")])
async def test_a_provider_failure_fails_a_user_task_without_retry(stack: Stack, status: int, error_class: str) -> None:
    stack.models.push(Turn.fail(status, "upstream trouble"), Turn.say("never used"))
    task_id = await stack.create_task("Summarise the logs", max_attempts=3)
    task = await stack.wait_task(task_id, "completed", "failed", "dead-letter")
    assert (task.status, task.last_error_class, task.attempt_count) == ("failed", error_class, 1)
    assert "upstream trouble" in task.last_error
    # Not replayed: the prompt reached the model once (the one other request is the remediation's turn).
    remediation = await settled_remediation(stack, task_id)
    assert [prompt_of(r) for r in stack.models.requests].count("Summarise the logs") == 1
    assert remediation.outcome == "never used"
    [failure] = [r for r in stack.hook_requests("StopFailure") if r["turnId"] == task.turn_id]
    assert failure["detail"]["statusCode"] == status
    [stop] = stops_of(stack, task_id)
    assert stop["turnId"] == task.turn_id
    assert (stop["detail"]["status"], stop["detail"]["error"]["class"]) == ("failed", error_class)


async def test_a_provider_failure_retries_self_update_work_then_dead_letters_with_one_remediation(
    stack: Stack,
) -> None:
    # Two failing attempts, then the remediation's own turn answers. The retry delay comes
    # from agent-runner's settings (0.1-0.2 s); the tasks env says 60 s, which would time out.
    stack.models.push(Turn.fail(503, "overloaded"), Turn.fail(500, "still down"), Turn.say("Investigated."))
    workspace_id = await git_workspace(stack)
    task_id = await self_update_task(stack, "Update the dependencies", workspace_id, max_attempts=2)
    task = await stack.wait_task(task_id, "dead-letter", "failed", "completed")
    assert (task.status, task.last_error_class, task.attempt_count) == ("dead-letter", "provider", 2)
    remediation = await settled_remediation(stack, task_id, workspace_id)
    # The remediation inherits the contained source: an answer without the implementer's and the
    # reviewer's delegations cannot complete it (docs/self-update.md).
    assert (remediation.status, remediation.last_error_class) == ("failed", "containment")
    assert "no successful implementer delegation" in remediation.last_error
    assert len(stack.models.requests) == 3
    stops = stops_of(stack, task_id)
    assert [(s["detail"]["status"], s["detail"]["willRetry"]) for s in stops] == [
        ("failed", True),
        ("dead-letter", False),
    ]
    # Each attempt is its own turn.
    assert len({stop["turnId"] for stop in stops}) == 2


async def test_a_denied_prompt_fails_the_task_as_hook_denied_without_a_model_call(stack: Stack) -> None:
    stack.receiver.script("/prompt", answer("deny", reason="no background work today"))
    stack.models.push(Turn.say("never used"))
    workspace_id = await git_workspace(stack)
    task_id = await self_update_task(stack, "Clean the caches", workspace_id, max_attempts=3)
    task = await stack.wait_task(task_id, "completed", "failed", "dead-letter")
    assert (task.status, task.last_error_class, task.attempt_count) == ("failed", "hook_denied", 1)
    assert "no background work today" in task.last_error
    # The remediation's own prompt is denied too.
    remediation = await settled_remediation(stack, task_id, workspace_id)
    assert (remediation.status, remediation.last_error_class) == ("failed", "hook_denied")
    assert stack.models.requests == []


async def test_cancelling_a_running_task_aborts_its_turn(stack: Stack) -> None:
    # 50 chunks, half a second apart: the stream would run for 25 s.
    stack.models.push(Turn.say("x" * 200, chunk_size=4, chunk_delay_s=0.5))
    task_id = await stack.create_task("Write a long report")
    await eventually(lambda: stack.models.requests, within=10, what="the turn to reach the model")
    started = time.monotonic()
    await stack.tasks.CancelTask(tpb.CancelTaskRequest(id=task_id))
    task = await stack.wait_task(task_id, "cancelled", "completed", "failed")
    assert task.status == "cancelled"
    assert task.outcome == ""
    assert time.monotonic() - started < 10
    # The model stream was abandoned mid-way: the turn itself stopped, not only the task row.
    await eventually(lambda: stack.models.disconnected > 0, within=10, what="the model stream to be abandoned")
    assert time.monotonic() - started < 10
    assert stack.hook_requests("Stop") == []
    [stop] = stops_of(stack, task_id)
    assert (stop["turnId"], stop["detail"]["status"]) == (task.turn_id, "cancelled")


async def test_a_task_turn_gets_the_workspace_tools_in_the_tasks_workspace(stack: Stack) -> None:
    repository = stack.workspace_root / "popagent"
    (repository / "status.txt").write_text("green\n")
    # The seeded policy asks before a command (docs/approvals.md); this test is about the tools.
    async with stack.runner_stub() as state:
        await state.UpdateAgent(arpb.UpdateAgentRequest(id="popagent", tool_approval_json="[]"))
    stack.models.push(
        Turn.call(ToolCall("mastra_workspace_read_file", {"path": "status.txt"}, id="read")),
        Turn.call(ToolCall("mastra_workspace_execute_command", {"command": "echo red > status.txt"}, id="run")),
        Turn.say("Marked red."),
    )
    task_id = await stack.create_task("Mark the status red")
    task = await stack.wait_task(task_id, "completed", "failed", "dead-letter")
    assert task.status == "completed", task.last_error
    assert (repository / "status.txt").read_text() == "red\n"
    first, second, third = stack.models.requests
    assert "mastra_workspace_execute_command" in [t["function"]["name"] for t in first["tools"]]
    assert "green" in second["messages"][-1]["content"]
    assert '"exitCode":0' in third["messages"][-1]["content"].replace(" ", "")
