"""Task-runtime settings changes apply to the running worker, without a restart.

agent-runner publishes `popagent.agent_runner.runtime_settings.changed` through its outbox
when the agent-runtime settings change; the tasks worker re-reads them and resizes its
slots. The change goes through `UpdateAgentRuntimeSettings`, the RPC that
`PATCH /api/settings/agent-runtime` forwards to.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from popagent.agent_runner.v1 import agent_runner_pb2 as arpb
from support.model_gateway import Turn
from support.stacks import TASK_TURN_STACK, start_stack
from support.waiting import eventually

# Each turn streams for about six seconds: long enough to see two attempts overlap.
SLOW_ANSWER = Turn.say("x" * 48, chunk_size=4, chunk_delay_s=0.5)


async def test_task_runtime_changes_reach_the_running_worker_without_a_restart(
    pg_dsn: str, internal_credentials: tuple[dict[str, str], str], tmp_path: Path
) -> None:
    # A stack of its own: the shared one runs four slots, and this test changes the setting.
    spec = TASK_TURN_STACK.with_runtime(task_concurrency=1)
    async with start_stack(pg_dsn, internal_credentials, tmp_path, spec) as stack:
        stack.reset()
        worker = stack.running.worker
        assert worker is not None and worker.config.concurrency == 1
        stack.models.push(SLOW_ANSWER, SLOW_ANSWER)
        first = await stack.create_task("First slow task")
        second = await stack.create_task("Second slow task")

        await eventually(lambda: len(worker.slots) == 1, within=10, what="the first attempt to start")
        await asyncio.sleep(1.0)
        # One slot: the second task waits while the first runs.
        assert len(worker.slots) == 1
        assert sorted([(await stack.get_task(first)).status, (await stack.get_task(second)).status]) == [
            "queued",
            "running",
        ]

        updated = await stack.state.UpdateAgentRuntimeSettings(
            arpb.UpdateAgentRuntimeSettingsRequest(task_concurrency=2)
        )
        assert not updated.violations and updated.settings.task_concurrency == 2

        # No restart: the same worker now holds both attempts at once, the first one undisturbed.
        await eventually(lambda: len(worker.slots) == 2, within=5, what="the second attempt to start beside the first")
        assert worker.config.concurrency == 2
        done = [
            await stack.wait_task(task_id, "completed", "failed", "dead-letter", "cancelled")
            for task_id in (first, second)
        ]
        assert [(task.status, task.attempt_count) for task in done] == [("completed", 1), ("completed", 1)]

        # The other task-runtime settings (timeout, heartbeat, retry timing) reach the same worker too.
        changed = await stack.state.UpdateAgentRuntimeSettings(
            arpb.UpdateAgentRuntimeSettingsRequest(
                task_attempt_timeout_ms=45_000,
                task_heartbeat_interval_ms=300,
                task_heartbeat_timeout_ms=4_000,
                task_retry_base_ms=150,
                task_retry_cap_ms=600,
            )
        )
        assert not changed.violations

        def runtime() -> tuple[float, ...]:
            config = worker.config
            return (
                config.task_timeout_s,
                config.heartbeat_interval_s,
                config.heartbeat_timeout_s,
                config.backoff.base_s,
                config.backoff.cap_s,
            )

        assert runtime() != (45.0, 0.3, 4.0, 0.15, 0.6)
        await eventually(
            runtime, until=lambda seen: seen == (45.0, 0.3, 4.0, 0.15, 0.6), within=5, what="the worker's new runtime"
        )
