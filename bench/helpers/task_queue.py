"""Worker-process fleets over a stoppable PostgreSQL and an embedded NATS, for the task-queue
fault benchmarks: one server pair per run, a fresh migrated database per scenario.

The workers are the tests' own (`tests/tasks/processes.py`: `python -m popagent_tasks worker`
running the scripted executor of `tests/tasks/executors.py`), so a benchmark scenario and its
CI-sized test drive the same processes. `tests/` must be on sys.path (the benchmark puts it there).
"""

from __future__ import annotations

import contextlib
import random
import signal
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
from tasks.executors import EFFECTS_TABLE
from tasks.harness import tasks_env
from tasks.processes import WorkerProcess

from bench.helpers.databases import emptied_database
from popagent_core.credentials import generate_credentials
from popagent_core.migrate import migrate
from popagent_dev import embedded
from popagent_dev.embedded import StoppablePostgres, stoppable_postgres
from popagent_tasks.service import MIGRATIONS

# 16 workers, each with its service pool and the executor's effects pool, pass initdb's 100.
MAX_CONNECTIONS = 500


@dataclass
class Servers:
    postgres: StoppablePostgres
    nats_url: str
    callers: str
    logs: Path

    async def database(self, name: str) -> str:
        """A fresh database `name` with the tasks schema and the effects table."""
        dsn = await emptied_database(self.postgres.dsn, name)
        await migrate(dsn, "tasks", MIGRATIONS)
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(EFFECTS_TABLE)
        finally:
            await conn.close()
        return dsn


async def _raise_connection_limit(postgres: StoppablePostgres) -> None:
    conn = await asyncpg.connect(postgres.dsn)
    try:
        if int(await conn.fetchval("SHOW max_connections")) >= MAX_CONNECTIONS:
            return
        await conn.execute(f"ALTER SYSTEM SET max_connections = {MAX_CONNECTIONS}")
    finally:
        await conn.close()
    postgres.stop()
    postgres.start()


@contextlib.asynccontextmanager
async def servers() -> AsyncIterator[Servers]:
    """A private PostgreSQL (stoppable, for restarts mid-run) and NATS for one benchmark run."""
    with (
        tempfile.TemporaryDirectory(prefix="popagent-bench-task-queue-") as folder,
        stoppable_postgres() as postgres,
        embedded.nats(Path(folder) / "nats") as nats,
    ):
        await _raise_connection_limit(postgres)
        _, callers = generate_credentials()
        logs = Path(folder) / "logs"
        logs.mkdir()
        yield Servers(postgres, nats.url, callers, logs)


@dataclass
class Fleet:
    """Worker processes over one database; every one started is stopped at the end."""

    servers: Servers
    dsn: str
    env: dict[str, str]
    name: str
    processes: list[WorkerProcess] = field(default_factory=list)
    killed: list[WorkerProcess] = field(default_factory=list)

    def spawn(self, **extra: str) -> WorkerProcess:
        env = tasks_env(self.dsn, self.servers.nats_url, self.servers.callers, **{**self.env, **extra})
        process = WorkerProcess(env, self.servers.logs / f"{self.name}-{len(self.processes) + len(self.killed)}.log")
        self.processes.append(process)
        return process

    async def start(self, count: int, **extra: str) -> list[WorkerProcess]:
        started = [self.spawn(**extra) for _ in range(count)]
        for process in started:
            await process.wait_ready(within=120)
        return started

    def kill(self, victim: WorkerProcess) -> None:
        """SIGKILL one worker and reap it; it is then out of the fleet."""
        victim.signal(signal.SIGKILL)
        victim.process.wait()
        self.processes.remove(victim)
        self.killed.append(victim)

    def kill_one(self, rng: random.Random) -> WorkerProcess:
        """SIGKILL a random live worker."""
        victim = rng.choice(self.processes)
        self.kill(victim)
        return victim

    def stop(self) -> None:
        for process in self.processes + self.killed:
            process.signal(signal.SIGCONT)
            process.stop()


@contextlib.contextmanager
def fleet(servers: Servers, dsn: str, name: str, **env: str) -> Iterator[Fleet]:
    workers = Fleet(servers, dsn, env, name)
    try:
        yield workers
    finally:
        workers.stop()
