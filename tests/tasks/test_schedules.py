"""Schedules: cron arithmetic in the server timezone, materialization under row locks, the
one-time timezone/next-run backfill, and the scheduler loop."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from popagent_core.errors import InvalidArgument
from popagent_tasks.repo import TaskRepo
from popagent_tasks.schedules import (
    BACKFILL_NAME,
    BACKFILL_SCOPE,
    Scheduler,
    backfill_schedules,
    due_ticks,
    next_run,
    validate_cron,
)
from support.waiting import eventually


async def insert_schedule(pool: asyncpg.Pool, **values: object) -> asyncpg.Record:
    row = {
        "source": "user",
        "workspace_id": "ws-1",
        "cron": "0 * * * *",
        "timezone": "UTC",
        "next_run_at": datetime.now(UTC) - timedelta(seconds=1),
        "enabled": True,
        "max_attempts": 3,
        **values,
    }
    return await pool.fetchrow(
        "INSERT INTO popagent_agent_schedules (source, workspace_id, name, prompt, model, session_id, cron,"
        " timezone, next_run_at, enabled, max_attempts)"
        " VALUES ($1, $2, 'n', 'p', 'm/x', 's-1', $3, $4, $5, $6, $7) RETURNING *",
        row["source"],
        row["workspace_id"],
        row["cron"],
        row["timezone"],
        row["next_run_at"],
        row["enabled"],
        row["max_attempts"],
    )


@pytest.mark.parametrize("expression", ["* * * * * *", "61 * * * *", "", "@reboot", "x" * 121, "* * *"])
def test_cron_must_be_a_valid_five_field_expression(expression: str) -> None:
    with pytest.raises(InvalidArgument):
        validate_cron(expression)


def test_next_runs_follow_the_schedules_timezone_across_daylight_saving() -> None:
    # Oslo moves from CET (+1) to CEST (+2) on 2026-03-29: 08:30 local is 07:30 UTC before, 06:30 after.
    before_spring = datetime(2026, 3, 28, 12, tzinfo=UTC)
    first = next_run("30 8 * * *", "Europe/Oslo", before_spring)
    assert first is not None
    second = next_run("30 8 * * *", "Europe/Oslo", first)
    assert first == datetime(2026, 3, 29, 6, 30, tzinfo=UTC)  # 08:30 CEST
    assert second == datetime(2026, 3, 30, 6, 30, tzinfo=UTC)
    assert next_run("30 8 * * *", "UTC", before_spring) == datetime(2026, 3, 29, 8, 30, tzinfo=UTC)


def test_due_ticks_are_bounded_per_pass_and_name_the_next_run() -> None:
    first = datetime(2026, 1, 1, tzinfo=UTC)
    now = first + timedelta(hours=10, minutes=5)
    ticks, following = due_ticks("0 * * * *", "UTC", first, now)
    assert ticks == [first + timedelta(hours=h) for h in range(11)]
    assert following == first + timedelta(hours=11)
    bounded, resume = due_ticks("0 * * * *", "UTC", first, now, limit=4)
    assert len(bounded) == 4 and resume == first + timedelta(hours=4)


async def test_materialization_copies_provenance_and_max_attempts_and_advances_once(pool: asyncpg.Pool) -> None:
    repo = TaskRepo(pool)
    schedule = await insert_schedule(pool, source="self-update", workspace_id="ws-5", max_attempts=7)

    async def policy_on() -> bool:
        return True

    # A self-update tick becomes a task only when the policy, reread then, allows it.
    scheduler = Scheduler(repo, self_update_allowed=policy_on)

    created = await asyncio.gather(scheduler.run_once(), scheduler.run_once(), scheduler.run_once())

    assert sum(created) == 1
    [task] = await pool.fetch("SELECT * FROM popagent_agent_tasks")
    assert (task["source"], task["workspace_id"], task["max_attempts"], task["model"], task["session_id"]) == (
        "self-update",
        "ws-5",
        7,
        "m/x",
        "s-1",
    )
    assert (task["schedule_id"], task["tick"]) == (schedule["id"], schedule["next_run_at"])
    advanced = await pool.fetchrow("SELECT * FROM popagent_agent_schedules WHERE id = $1", schedule["id"])
    assert advanced["last_tick"] == schedule["next_run_at"]
    assert advanced["next_run_at"] == next_run("0 * * * *", "UTC", schedule["next_run_at"])
    assert await pool.fetchval("SELECT count(*) FROM popagent_outbox") == 1
    # Disabled schedules never fire.
    await insert_schedule(pool, enabled=False)
    assert await scheduler.run_once() == 0


async def test_provenance_is_immutable_in_the_database(pool: asyncpg.Pool) -> None:
    schedule = await insert_schedule(pool)
    with pytest.raises(asyncpg.CheckViolationError):
        await pool.execute("UPDATE popagent_agent_schedules SET source = 'self-update' WHERE id = $1", schedule["id"])
    task = await TaskRepo(pool).create_task(
        source="user", workspace_id="ws-1", prompt="p", model="m", session_id="", max_attempts=3
    )
    for column, value in (("workspace_id", "elsewhere"), ("prompt", "other"), ("source", "self-update")):
        with pytest.raises(asyncpg.CheckViolationError):
            await pool.execute(f"UPDATE popagent_agent_tasks SET {column} = $2 WHERE id = $1", task.id, value)


async def test_one_self_update_schedule_per_workspace(pool: asyncpg.Pool) -> None:
    await insert_schedule(pool, source="self-update", workspace_id="ws-1")
    await insert_schedule(pool, source="user", workspace_id="ws-1")
    with pytest.raises(asyncpg.UniqueViolationError):
        await insert_schedule(pool, source="self-update", workspace_id="ws-1")


async def test_the_backfill_runs_once_fills_only_missing_values_and_disables_unparseable_rows(
    pool: asyncpg.Pool,
) -> None:
    legacy = await insert_schedule(pool, timezone=None, next_run_at=None, cron="15 4 * * *")
    broken = await insert_schedule(pool, timezone=None, next_run_at=None, cron="not cron")
    kept_at = datetime(2030, 1, 1, tzinfo=UTC)
    current = await insert_schedule(pool, timezone="Asia/Tokyo", next_run_at=kept_at)

    ran = await asyncio.gather(*(backfill_schedules(pool, "Europe/Oslo") for _ in range(3)))

    assert sorted(ran) == [False, False, True]
    rows = {r["id"]: r for r in await pool.fetch("SELECT * FROM popagent_agent_schedules")}
    assert rows[legacy["id"]]["timezone"] == "Europe/Oslo"
    filled = rows[legacy["id"]]["next_run_at"]
    assert filled > datetime.now(UTC) and filled.astimezone().minute == 15
    assert (rows[broken["id"]]["enabled"], rows[broken["id"]]["next_run_at"]) == (False, None)
    assert (rows[current["id"]]["timezone"], rows[current["id"]]["next_run_at"]) == ("Asia/Tokyo", kept_at)
    marker = await pool.fetchval(
        "SELECT count(*) FROM popagent_data_migrations WHERE scope = $1 AND name = $2", BACKFILL_SCOPE, BACKFILL_NAME
    )
    assert marker == 1
    # After the marker, ordinary starts never touch schedules again.
    late = await insert_schedule(pool, timezone=None, next_run_at=None)
    assert await backfill_schedules(pool, "UTC") is False
    assert (await pool.fetchrow("SELECT * FROM popagent_agent_schedules WHERE id = $1", late["id"]))["timezone"] is None


async def test_the_scheduler_loop_fires_a_due_schedule_and_sleeps_until_the_next(pool: asyncpg.Pool) -> None:
    repo = TaskRepo(pool)
    scheduler = Scheduler(repo, max_sleep_s=0.2)
    running = asyncio.create_task(scheduler.run())
    try:
        await insert_schedule(pool, next_run_at=datetime.now(UTC) + timedelta(milliseconds=300))
        scheduler.wake()
        await eventually(
            lambda: pool.fetchval("SELECT count(*) FROM popagent_agent_tasks"), until=lambda n: n == 1, within=5
        )
        await asyncio.sleep(0.5)
        assert await pool.fetchval("SELECT count(*) FROM popagent_agent_tasks") == 1
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
