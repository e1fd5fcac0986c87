"""Cron schedules: validation, next-run arithmetic in the server's timezone, the
materialization loop that every replica runs, and the one-time timezone/next-run backfill.

Any number of replicas may run `Scheduler`: each due schedule is locked with SKIP
LOCKED while its ticks become tasks, and `UNIQUE (schedule_id, tick)` makes a tick that
two replicas both reach become one task.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import asyncpg
from croniter import CroniterBadDateError, croniter

from popagent_core.db import wrap_db_errors
from popagent_core.errors import InvalidArgument
from popagent_core.lifecycle import wait_event
from popagent_tasks.model import Schedule
from popagent_tasks.repo import QUERIES, TaskRepo

logger = logging.getLogger(__name__)

PREVIEW_RUNS = 5
# A schedule that was down for a long time catches up over several passes, never one huge transaction.
MAX_TICKS_PER_PASS = 100
MAX_CRON_CHARS = 120

BACKFILL_SCOPE = "tasks-backfill"
BACKFILL_NAME = "0001_schedule_timezone_next_run"


def server_timezone() -> str:
    """The IANA name of this machine's timezone (TZ, then /etc/localtime), else UTC."""
    candidates = []
    if os.environ.get("TZ"):
        candidates.append(os.environ["TZ"].lstrip(":"))
    with contextlib.suppress(OSError):
        link = os.readlink("/etc/localtime")
        if "zoneinfo/" in link:
            candidates.append(link.split("zoneinfo/", 1)[1])
    for name in candidates:
        with contextlib.suppress(ZoneInfoNotFoundError, ValueError):
            ZoneInfo(name)
            return name
    return "UTC"


def check_timezone(name: str) -> str:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"{name!r} is not an IANA timezone") from None
    return name


def validate_cron(expression: str) -> str:
    """A standard five-field cron expression (minute resolution), or InvalidArgument."""
    expression = " ".join(expression.split())
    if not expression or len(expression) > MAX_CRON_CHARS:
        raise InvalidArgument("cron must be a non-empty expression of at most 120 characters")
    if len(expression.split(" ")) != 5 or not croniter.is_valid(expression):
        raise InvalidArgument(f"cron {expression!r} is not a valid five-field cron expression")
    return expression


def next_run(expression: str, timezone: str, after: datetime) -> datetime | None:
    """The first run strictly after `after`, computed in `timezone` (DST-aware), as UTC; None for
    a valid expression that names no date there is (`0 0 30 2 *`): such a schedule never runs."""
    start = after.astimezone(ZoneInfo(timezone))
    try:
        return croniter(expression, start).get_next(datetime).astimezone(UTC)
    except CroniterBadDateError:
        return None


def preview(expression: str, timezone: str, after: datetime, count: int = PREVIEW_RUNS) -> list[datetime]:
    runs: list[datetime] = []
    following = next_run(expression, timezone, after)
    while following is not None and len(runs) < count:
        runs.append(following)
        following = next_run(expression, timezone, following)
    return runs


def due_ticks(
    expression: str, timezone: str, first: datetime, now: datetime, limit: int = MAX_TICKS_PER_PASS
) -> tuple[list[datetime], datetime | None]:
    """Every tick from `first` up to `now` (at most `limit`), and the run after the last.

    `first` was found due by the database's clock, so it is always included even when
    this process's clock is a little behind.
    """
    ticks = [first]
    following = next_run(expression, timezone, first)
    while following is not None and following <= now and len(ticks) < limit:
        ticks.append(following)
        following = next_run(expression, timezone, following)
    return ticks, following


def _ticks_for(schedule: Schedule) -> tuple[list[datetime], datetime | None]:
    if schedule.timezone is None or schedule.next_run_at is None:
        # Only a row the one-time backfill has not reached yet; it runs before any scheduler.
        return [], schedule.next_run_at
    return due_ticks(schedule.cron, schedule.timezone, schedule.next_run_at, datetime.now(UTC))


class Scheduler:
    """Materializes due schedule ticks; sleeps until the earliest next run (bounded)."""

    def __init__(
        self,
        repo: TaskRepo,
        *,
        max_sleep_s: float = 5.0,
        batch: int = 50,
        self_update_allowed: Callable[[], Awaitable[bool]] | None = None,
    ) -> None:
        self.repo = repo
        # Asked while a due self-update schedule is locked; None: its ticks never become tasks.
        self.self_update_allowed = self_update_allowed
        self.max_sleep_s = max_sleep_s
        self.batch = batch
        self._wake = asyncio.Event()

    def wake(self) -> None:
        """A schedule changed here; recompute when to run next."""
        self._wake.set()

    async def run_once(self) -> int:
        return await self.repo.materialize_due(_ticks_for, self.batch, self.self_update_allowed)

    async def run(self) -> None:
        while True:
            self._wake.clear()
            sleep_s = self.max_sleep_s
            try:
                await self.run_once()
                due = await self.repo.next_schedule_due()
                if due is not None:
                    sleep_s = min(max((due - datetime.now(UTC)).total_seconds(), 0.01), self.max_sleep_s)
            except Exception:
                logger.warning("schedule materialization failed; retrying", exc_info=True)
            await wait_event(self._wake, sleep_s)


async def backfill_schedules(pool: asyncpg.Pool, timezone: str) -> bool:
    """Once per database: give schedules written before timezone/next-run existed both values.

    Holds an advisory transaction lock, rechecks the marker after locking, and records
    the marker in the same transaction, only after every row is filled; so concurrent
    starts run it once and a failed run leaves no marker. After the marker, ordinary
    starts never recompute an existing schedule. A row whose cron no longer parses is
    disabled rather than guessed at. Returns whether this call ran the backfill.
    """
    checksum = hashlib.sha256(f"{BACKFILL_NAME}:{timezone}".encode()).hexdigest()
    now = datetime.now(UTC)
    with wrap_db_errors():
        async with pool.acquire() as conn, conn.transaction():
            await conn.execute(QUERIES["lock_backfill"])
            if await conn.fetchval(QUERIES["backfill_marker"], BACKFILL_SCOPE, BACKFILL_NAME):
                return False
            for row in await conn.fetch(QUERIES["schedules_to_backfill"]):
                try:
                    expression = validate_cron(row["cron"])
                except InvalidArgument:
                    logger.warning(
                        "schedule with an invalid cron disabled by the backfill", extra={"id": str(row["id"])}
                    )
                    await conn.execute(QUERIES["backfill_schedule"], row["id"], timezone, None, False)
                    continue
                await conn.execute(
                    QUERIES["backfill_schedule"], row["id"], timezone, next_run(expression, timezone, now), True
                )
            await conn.execute(QUERIES["record_backfill_marker"], BACKFILL_SCOPE, BACKFILL_NAME, checksum)
    return True
