"""Fixtures of the tasks tests: a fresh migrated database per test, a pool over it, a
recording lifecycle observer and a harness of real workers (tasks/harness.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from popagent_core.db import open_pool
from popagent_tasks.executor import AbortReason
from tasks.harness import TASKS_MIGRATIONS, Harness, Recorder


@pytest.fixture
async def tasks_dsn(make_database) -> str:  # type: ignore[no-untyped-def]
    return await make_database(TASKS_MIGRATIONS)


@pytest.fixture
async def pool(tasks_dsn: str) -> AsyncIterator[asyncpg.Pool]:
    async with open_pool(tasks_dsn, "tasks", max_size=8) as opened:
        yield opened


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
async def harness(pool: asyncpg.Pool, recorder: Recorder) -> AsyncIterator[Harness]:
    h = Harness(pool, recorder)
    yield h
    for worker in h.workers:
        for slot in worker.slots.values():
            slot.abort.abort(AbortReason.SHUTDOWN)
        for executor in h.executors:
            for gate in executor.gates.values():
                gate.set()
        await worker.close()
