"""The task-enqueued wake-up across a NATS broker restart: polling carries the outage, the
fast path comes back with the broker, and the outbox keeps every fact."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from popagent_core.settings import load_settings
from popagent_dev import embedded
from popagent_tasks.service import build
from popagent_tasks.settings import Settings
from support.waiting import eventually
from tasks.executors import ScriptedExecutor
from tasks.harness import tasks_env

POLL_S = 3.0


async def started_within(running, prompt: str) -> float:  # type: ignore[no-untyped-def]
    began = time.monotonic()
    task = await running.repo.create_task(
        source="user", workspace_id="ws-1", prompt=prompt, model="", session_id="", max_attempts=3
    )
    await eventually(
        lambda: running.repo.get_task(str(task.id)), until=lambda found: found.status == "completed", within=POLL_S + 5
    )
    return time.monotonic() - began


@pytest.mark.timeout(90)
async def test_work_continues_through_a_broker_restart_and_wake_ups_resume(
    tasks_dsn: str, nats_server: embedded.NatsProcess, internal_credentials: tuple[dict[str, str], str], tmp_path: Path
) -> None:
    _, callers = internal_credentials
    env = tasks_env(
        tasks_dsn,
        nats_server.url,
        callers,
        POPAGENT_TASKS_POLL_INTERVAL_S=str(POLL_S),
        POPAGENT_TASKS_SHUTDOWN_GRACE_S="0.2",
        POPAGENT_TASKS_ABORT_ACK_S="0.2",
    )
    settings = load_settings(Settings, "tasks", **env)
    async with build(settings, executor=ScriptedExecutor()) as running:
        assert await started_within(running, "ok") < 1.0  # woken, not polled

        nats_server.stop()
        during = await started_within(running, "ok")
        assert during < POLL_S + 1.5  # the poll found it
        unpublished = "SELECT count(*) FROM popagent_outbox WHERE published_at IS NULL"
        assert await running.repo.pool.fetchval(unpublished) >= 1  # the fact waits in the outbox

        # Same store: JetStream streams survive the restart, as they do on a real broker.
        restarted = embedded.start_nats(tmp_path / "nats", port=nats_server.port)
        try:
            # Once reconnected, the wake-up is back: a task starts well before the next poll.
            await eventually(
                lambda: started_within(running, "ok"), until=lambda seconds: seconds < 1.0, within=30, interval=0
            )
            await eventually(lambda: running.repo.pool.fetchval(unpublished), until=lambda n: n == 0, within=15)
        finally:
            restarted.stop()
