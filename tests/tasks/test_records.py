"""Every statement that hands out tasks or schedules returns exactly the columns of their
records, so `repo.py`'s one mapping of each row reads every statement alike."""

from __future__ import annotations

import dataclasses

import asyncpg
import pytest

from popagent_tasks.model import Schedule, Task
from popagent_tasks.repo import QUERIES

TASK_QUERIES = (
    "insert_task",
    "get_task",
    "list_tasks",
    "cancel_task",
    "resolve_task",
    "claim_tasks",
    "complete_attempts",
    "fail_attempt",
    "settle_cancelled",
    "release_attempts",
    "recover_orphans",
)
SCHEDULE_QUERIES = ("insert_schedule", "list_schedules", "lock_user_schedule", "update_schedule", "lock_due_schedules")


@pytest.mark.parametrize(
    ("name", "record"),
    [(name, Task) for name in TASK_QUERIES] + [(name, Schedule) for name in SCHEDULE_QUERIES],
)
async def test_the_statement_returns_the_records_columns_in_order(pool: asyncpg.Pool, name: str, record: type) -> None:
    async with pool.acquire() as conn:
        statement = await conn.prepare(QUERIES[name])
        columns = [attribute.name for attribute in statement.get_attributes()]
    assert columns == [field.name for field in dataclasses.fields(record)]
