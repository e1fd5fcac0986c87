"""Helpers of the tasks tests: workers over one database, a recording lifecycle observer,
fast timings, the environment of a tasks process, and time travel."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from typing import Any

import asyncpg

from popagent_dev.embedded import free_port
from popagent_tasks.model import Backoff
from popagent_tasks.observer import Observers, TaskStarted, TaskStopped
from popagent_tasks.repo import TaskRepo
from popagent_tasks.service import MIGRATIONS
from popagent_tasks.worker import RuntimeConfig, Worker
from support.waiting import eventually
from tasks.executors import ScriptedExecutor

TASKS_MIGRATIONS = {"tasks": MIGRATIONS}

# Fast timings for in-process workers: every interval is short, every bound still holds.
FAST = RuntimeConfig(
    concurrency=4,
    claim_batch=10,
    task_timeout_s=20.0,
    abort_ack_s=0.4,
    heartbeat_interval_s=0.1,
    heartbeat_timeout_s=2.0,
    stale_after_s=3600.0,
    poll_interval_s=0.2,
    sweep_interval_s=0.3,
    backoff=Backoff(0.05, 0.2),
    shutdown_grace_s=0.3,
)

# The same for worker processes, as environment variables.
FAST_ENV = {
    "POPAGENT_TASKS_HEARTBEAT_INTERVAL_S": "0.2",
    "POPAGENT_TASKS_HEARTBEAT_TIMEOUT_S": "1.5",
    "POPAGENT_TASKS_SWEEP_INTERVAL_S": "0.3",
    "POPAGENT_TASKS_POLL_INTERVAL_S": "0.5",
    "POPAGENT_TASKS_ABORT_ACK_S": "0.5",
    "POPAGENT_TASKS_RETRY_BASE_S": "0.05",
    "POPAGENT_TASKS_RETRY_CAP_S": "0.2",
    "POPAGENT_TASKS_SHUTDOWN_GRACE_S": "1",
}


def tasks_env(dsn: str, nats_url: str, callers: str, **extra: str) -> dict[str, str]:
    return {
        "DATABASE_URL": dsn,
        "NATS_URL": nats_url,
        "POPAGENT_INTERNAL_CALLERS": callers,
        "POPAGENT_TASKS_ADDR": f"127.0.0.1:{free_port()}",
        "POPAGENT_TASKS_HOOKS_ENABLED": "false",
        # No browser-bridge runs beside these workers.
        "POPAGENT_TASKS_BROWSER_CLOSE_ENABLED": "false",
        **extra,
    }


@dataclass
class Recorder:
    """A lifecycle observer that records what it is told (and can be told to fail)."""

    events: list[TaskStarted | TaskStopped] = field(default_factory=list)
    fail: bool = False

    async def task_started(self, event: TaskStarted) -> None:
        self.events.append(event)
        if self.fail:
            raise RuntimeError("observer down")

    async def task_stopped(self, event: TaskStopped) -> None:
        self.events.append(event)
        if self.fail:
            raise RuntimeError("observer down")

    def for_task(self, task_id: uuid.UUID | str) -> list[TaskStarted | TaskStopped]:
        return [e for e in self.events if e.task.task_id == str(task_id)]

    def shape(self, task_id: uuid.UUID | str) -> list[str]:
        """['start:1', 'stop:1:failed:retry', ...] for one task."""
        out = []
        for event in self.for_task(task_id):
            if isinstance(event, TaskStarted):
                out.append(f"start:{event.task.attempt}")
            else:
                out.append(f"stop:{event.task.attempt}:{event.status}" + (":retry" if event.will_retry else ""))
        return out


class Harness:
    """Workers over one database, woken directly on every enqueue (no NATS in-process)."""

    def __init__(self, pool: asyncpg.Pool, recorder: Recorder) -> None:
        self.pool = pool
        self.recorder = recorder
        self.workers: list[Worker] = []
        self.executors: list[ScriptedExecutor] = []

        async def wake(_: str) -> None:
            for worker in self.workers:
                worker.wake()

        self.repo = TaskRepo(pool, wake=wake)

    def worker(
        self, executor: ScriptedExecutor | None = None, *, observers: list[Any] | None = None, **config: Any
    ) -> Worker:
        executor = executor or ScriptedExecutor()
        if executor not in self.executors:
            self.executors.append(executor)
        worker = Worker(
            self.repo,
            executor,
            Observers(observers if observers is not None else [self.recorder]),
            replace(FAST, **config),
        )
        self.workers.append(worker)
        return worker

    async def create(
        self, prompt: str, *, source: str = "user", max_attempts: int = 3, workspace: str = "ws-1"
    ) -> uuid.UUID:
        task = await self.repo.create_task(
            source=source,
            workspace_id=workspace,
            prompt=prompt,
            model="test/model",
            session_id="session-1",
            max_attempts=max_attempts,
        )
        return task.id

    async def row(self, task_id: uuid.UUID) -> asyncpg.Record:
        row = await self.pool.fetchrow("SELECT * FROM popagent_agent_tasks WHERE id = $1", task_id)
        assert row is not None
        return row

    async def status(self, task_id: uuid.UUID) -> str:
        return (await self.row(task_id))["status"]

    def holds(self, task_id: uuid.UUID) -> bool:
        return any(task_id in worker.slots for worker in self.workers)

    async def wait_status(self, task_id: uuid.UUID, *statuses: str, within: float = 10.0) -> asyncpg.Record:
        """The row once it reaches one of `statuses`; for a status no executor is behind,
        also once its worker let go of it (its TaskStop has been delivered by then)."""

        async def fetch() -> tuple[asyncpg.Record, bool]:
            row = await self.row(task_id)
            return row, row["status"] in ("running", "cancelling") or not self.holds(task_id)

        row, _ = await eventually(
            fetch, until=lambda value: value[0]["status"] in statuses and value[1], within=within, interval=0.02
        )
        return row

    async def progress(self, task_id: uuid.UUID) -> list[asyncpg.Record]:
        return await self.pool.fetch(
            "SELECT attempt, kind, message, created_at FROM popagent_agent_task_progress WHERE task_id = $1 ORDER BY id",
            task_id,
        )

    async def remediations_of(self, task_id: uuid.UUID) -> list[asyncpg.Record]:
        return await self.pool.fetch(
            "SELECT * FROM popagent_agent_tasks WHERE kind = 'remediation' AND parent_task_id = $1", task_id
        )

    async def backdate_heartbeat(self, task_id: uuid.UUID, seconds: float) -> None:
        """Time travel: the attempt's last heartbeat happened `seconds` ago."""
        await self.pool.execute(
            "UPDATE popagent_agent_tasks SET heartbeat_at = clock_timestamp() - make_interval(secs => $2)"
            " WHERE id = $1",
            task_id,
            seconds,
        )
