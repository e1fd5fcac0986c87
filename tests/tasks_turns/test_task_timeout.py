"""An attempt that outlives agent-runner's `taskAttemptTimeoutMs` fails as a timeout and its turn stops."""

from __future__ import annotations

import time
from pathlib import Path

from popagent.tasks.v1 import tasks_pb2 as tpb
from support.model_gateway import Turn
from support.stacks import TASK_TURN_STACK, start_stack
from support.waiting import eventually


async def test_an_attempt_past_its_deadline_fails_as_a_timeout_and_its_turn_stops(
    pg_dsn: str, internal_credentials: tuple[dict[str, str], str], tmp_path: Path
) -> None:
    spec = TASK_TURN_STACK.with_runtime(task_attempt_timeout_ms=1000, task_abort_ack_timeout_ms=2000)
    async with start_stack(pg_dsn, internal_credentials, tmp_path, spec) as stack:
        stack.reset()
        # 50 chunks, half a second apart: far past the one-second deadline.
        stack.models.push(Turn.say("y" * 200, chunk_size=4, chunk_delay_s=0.5))
        started = time.monotonic()
        task_id = await stack.create_task("Take your time", max_attempts=3)
        task = await stack.wait_task(task_id, "failed", "completed", "dead-letter", "cancelled")
        assert (task.status, task.last_error_class, task.attempt_count) == ("failed", "timeout", 1)
        assert time.monotonic() - started < 8
        await eventually(lambda: stack.models.disconnected > 0, within=10, what="the model stream to be abandoned")
        assert time.monotonic() - started < 10
        stops = [r for r in stack.hook_requests("TaskStop") if r["detail"]["taskId"] == task_id]
        assert [(s["detail"]["status"], s["detail"]["error"]["class"]) for s in stops] == [("failed", "timeout")]
        # Let the failed task's remediation finish before the stack goes away.
        stack.models.push(Turn.say("Looked into it."))
        listed = await stack.tasks.ListTasks(tpb.ListTasksRequest(workspace_id="popagent"))
        [remediation] = [t for t in listed.tasks if t.parent_task_id == task_id]
        await stack.wait_task(remediation.id, "completed", "failed", "dead-letter", "cancelled")
