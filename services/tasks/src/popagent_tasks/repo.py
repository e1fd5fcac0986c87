"""TaskRepo: every read and write of tasks, progress and schedules (SQL in queries.sql).

Enqueues write the `task.enqueued` fact to the outbox in the same transaction, so no
wake-up is ever lost, and then publish it on core NATS after the commit as a fast path
(the relay's copy follows a NOTIFY later; a duplicate wake-up costs one empty claim).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import cast

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from popagent.events.v1 import events_pb2
from popagent_core import bus, subjects
from popagent_core.db import load_queries, wrap_db_errors
from popagent_core.errors import Conflict, FailedPrecondition, NotFound
from popagent_tasks.model import (
    MAX_ERROR_CHARS,
    MAX_OUTCOME_CHARS,
    Kind,
    Status,
    truncate,
)

logger = logging.getLogger(__name__)

QUERIES = load_queries(Path(__file__).parent / "queries.sql")

Wake = Callable[[str], Awaitable[None]]
Conn = asyncpg.Connection | PoolConnectionProxy


class TaskNotFound(NotFound):
    """Task not found."""


class TaskActive(Conflict):
    """The task is active; only completed, failed, cancelled or dead-lettered tasks can be deleted."""


class TaskNotResolvable(FailedPrecondition):
    """Only failed, cancelled or dead-lettered tasks can be resolved."""


class TaskNotCancellable(FailedPrecondition):
    """The task already finished."""


class ScheduleNotFound(NotFound):
    """Schedule not found."""


def parse_id(value: str, error: type[NotFound]) -> uuid.UUID:
    """An id from the wire; a malformed one cannot name any row."""
    try:
        return uuid.UUID(value)
    except (ValueError, AttributeError, TypeError):
        raise error() from None


def remediation_prompt(row: asyncpg.Record) -> str:
    return (
        f"Background task {row['id']} in workspace {row['workspace_id']} ended {row['status']} "
        f"after attempt {row['attempt_count']} of {row['max_attempts']} "
        f"({row['last_error_class'] or 'unknown'}: {row['last_error'] or 'no detail'}).\n"
        "Investigate why it failed, fix what is within reach, and report what you found and did. "
        "Do not simply rerun the original work.\n\n"
        f"Original prompt:\n{truncate(row['prompt'], 8 * 1024)}"
    )


@dataclass(frozen=True)
class Transition:
    """A committed change of one attempt's task, and the remediation it created, if any."""

    row: asyncpg.Record
    remediation_id: uuid.UUID | None = None


@dataclass(frozen=True)
class Progress:
    attempt: int
    kind: str
    message: str


class TaskRepo:
    def __init__(self, pool: asyncpg.Pool, *, wake: Wake | None = None) -> None:
        self.pool = pool
        self.wake = wake

    async def _after_enqueue(self, reason: str) -> None:
        if self.wake is None:
            return
        try:
            await self.wake(reason)
        except Exception:
            # The outbox copy of the event is already committed; this was only the fast path.
            logger.warning("fast wake-up publish failed", exc_info=True)

    # -- API ------------------------------------------------------------------------

    async def create_task(
        self, *, source: str, workspace_id: str, prompt: str, model: str, session_id: str, max_attempts: int
    ) -> asyncpg.Record:
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                row = await conn.fetchrow(
                    QUERIES["insert_task"], source, workspace_id, prompt, model, session_id, max_attempts
                )
                await _enqueue_fact(conn, row["id"])
        await self._after_enqueue(str(row["id"]))
        return row

    async def create_tasks(
        self, prompts: Sequence[str], *, source: str, workspace_id: str, model: str = "", max_attempts: int = 3
    ) -> list[uuid.UUID]:
        """Many tasks in one transaction with one wake-up (bulk loads: tests, benchmarks)."""
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                rows = await conn.fetch(
                    QUERIES["insert_tasks"], source, workspace_id, model, max_attempts, list(prompts)
                )
                ids = [row["id"] for row in rows]
                if ids:
                    await _enqueue_fact(conn, ids[0])
        if ids:
            await self._after_enqueue(str(ids[0]))
        return ids

    async def get_task(self, task_id: str) -> asyncpg.Record:
        with wrap_db_errors():
            row = await self.pool.fetchrow(QUERIES["get_task"], parse_id(task_id, TaskNotFound))
        if row is None:
            raise TaskNotFound()
        return row

    async def list_tasks(self, *, limit: int, workspace_id: str = "", status: str = "") -> list[asyncpg.Record]:
        with wrap_db_errors():
            return await self.pool.fetch(QUERIES["list_tasks"], limit, workspace_id, status)

    async def recent_progress(self, task_ids: Sequence[uuid.UUID], per_task: int) -> dict[uuid.UUID, list[Progress]]:
        with wrap_db_errors():
            rows = await self.pool.fetch(QUERIES["recent_progress"], list(task_ids), per_task)
        progress: dict[uuid.UUID, list[Progress]] = {}
        for row in rows:
            progress.setdefault(row["task_id"], []).append(Progress(row["attempt"], row["kind"], row["message"]))
        return progress

    async def cancel_task(self, task_id: str) -> asyncpg.Record:
        key = parse_id(task_id, TaskNotFound)
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                row = await conn.fetchrow(QUERIES["cancel_task"], key)
                if row is not None:
                    kind = "cancelled" if row["status"] == Status.CANCELLED else "cancel_requested"
                    message = (
                        "cancelled before it started"
                        if kind == "cancelled"
                        else "cancellation requested; durable once the executor settles"
                    )
                    await _progress(conn, [(key, row["attempt_count"], kind, message)])
                    return row
                current = await conn.fetchrow(QUERIES["get_task"], key)
        if current is None:
            raise TaskNotFound()
        if current["status"] == Status.CANCELLING:
            return current
        raise TaskNotCancellable(f"task is {current['status']}")

    async def resolve_task(self, task_id: str, evidence: str) -> asyncpg.Record:
        key = parse_id(task_id, TaskNotFound)
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                row = await conn.fetchrow(QUERIES["resolve_task"], key, evidence)
                if row is not None:
                    await _progress(
                        conn, [(key, row["attempt_count"], "resolved", f"resolved by operator: {evidence}")]
                    )
                    return row
                current = await conn.fetchrow(QUERIES["get_task"], key)
        if current is None:
            raise TaskNotFound()
        raise TaskNotResolvable(f"task is {current['status']}; only failed, cancelled or dead-letter can be resolved")

    async def delete_task(self, task_id: str) -> None:
        key = parse_id(task_id, TaskNotFound)
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                if await conn.fetchval(QUERIES["delete_task"], key) is not None:
                    return
                current = await conn.fetchrow(QUERIES["get_task"], key)
        if current is None:
            raise TaskNotFound()
        raise TaskActive(f"task is {current['status']}; cancel it and wait until it is terminal")

    # -- worker ---------------------------------------------------------------------

    async def claim(self, worker_id: str, limit: int) -> list[asyncpg.Record]:
        with wrap_db_errors():
            return await self.pool.fetch(QUERIES["claim_tasks"], worker_id, limit)

    async def heartbeat(self, held: Sequence[tuple[uuid.UUID, int]]) -> dict[uuid.UUID, str]:
        """Owned attempts still live, by id -> status."""
        with wrap_db_errors():
            rows = await self.pool.fetch(
                QUERIES["heartbeat"], [task_id for task_id, _ in held], [attempt for _, attempt in held]
            )
        return {row["id"]: row["status"] for row in rows}

    async def attempt_progress(self, task_id: uuid.UUID, attempt: int, kind: str, message: str) -> bool:
        with wrap_db_errors():
            inserted = await self.pool.fetchval(
                QUERIES["insert_attempt_progress"], task_id, attempt, kind, truncate(message, MAX_ERROR_CHARS)
            )
        return inserted is not None

    async def complete(self, done: Sequence[tuple[uuid.UUID, int, str]]) -> list[asyncpg.Record]:
        """Fenced completions in one statement; returns the rows that changed."""
        with wrap_db_errors():
            return await self.pool.fetch(
                QUERIES["complete_attempts"],
                [task_id for task_id, _, _ in done],
                [attempt for _, attempt, _ in done],
                [truncate(outcome, MAX_OUTCOME_CHARS) for _, _, outcome in done],
            )

    async def fail(
        self,
        task_id: uuid.UUID,
        attempt: int,
        *,
        error_class: str,
        message: str,
        retry_eligible: bool,
        delay_s: float,
        explain: str,
    ) -> Transition | None:
        """Fenced failure: queued for a retry, dead-lettered, failed, or (if a cancel won) cancelled."""
        message = truncate(message, MAX_ERROR_CHARS)
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                row = await conn.fetchrow(
                    QUERIES["fail_attempt"], task_id, attempt, error_class, message, retry_eligible, delay_s
                )
                if row is None:
                    return None
                status = Status(row["status"])
                head = f"attempt {attempt}/{row['max_attempts']} failed ({error_class}): {message}"
                if status is Status.QUEUED:
                    kind, note = "retry_scheduled", f"{head}; retrying in {delay_s:.1f} s"
                elif status is Status.DEAD_LETTER:
                    kind = "dead_letter"
                    note = f"{head}; retries exhausted after {attempt} attempts: dead-lettered, not retried again"
                elif status is Status.CANCELLED:
                    kind, note = "cancelled", f"cancelled; the executor settled with {error_class}: {message}"
                else:
                    kind, note = "failed", f"{head}; not retried: {explain}"
                await _progress(conn, [(task_id, attempt, kind, note)])
                transition = (await _terminal_followups(conn, [row], wake_queued=False))[0]
        if transition.remediation_id is not None:
            await self._after_enqueue("remediation")
        return transition

    async def settle_cancelled(self, task_id: uuid.UUID, attempt: int) -> Transition | None:
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                row = await conn.fetchrow(QUERIES["settle_cancelled"], task_id, attempt)
                if row is None:
                    return None
                await _progress(conn, [(task_id, attempt, "cancelled", "cancelled; the executor settled")])
        return Transition(row)

    async def release(self, held: Sequence[tuple[uuid.UUID, int]]) -> list[Transition]:
        """Shutdown: settled attempts back to the queue (or dead letter when exhausted)."""
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                rows = await conn.fetch(
                    QUERIES["release_attempts"], [task_id for task_id, _ in held], [attempt for _, attempt in held]
                )
                await _progress(conn, [_recovery_entry(row, "the worker stopped") for row in rows])
                transitions = await _terminal_followups(conn, rows, wake_queued=True)
        if any(t.remediation_id or t.row["status"] == Status.QUEUED for t in transitions):
            await self._after_enqueue("released")
        return transitions

    async def recover_orphans(
        self, *, heartbeat_timeout_s: float, stale_after_s: float, exclude: Sequence[uuid.UUID], limit: int
    ) -> list[Transition]:
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                rows = await conn.fetch(
                    QUERIES["recover_orphans"], heartbeat_timeout_s, stale_after_s, list(exclude), limit
                )
                await _progress(conn, [_recovery_entry(row, "its worker stopped heartbeating") for row in rows])
                transitions = await _terminal_followups(conn, rows, wake_queued=True)
        if any(t.remediation_id or t.row["status"] == Status.QUEUED for t in transitions):
            await self._after_enqueue("recovered")
        return transitions

    # -- schedules ------------------------------------------------------------------

    async def insert_schedule(self, **values: object) -> asyncpg.Record:
        with wrap_db_errors():
            return await self.pool.fetchrow(
                QUERIES["insert_schedule"],
                values["workspace_id"],
                values["name"],
                values["prompt"],
                values["model"],
                values["session_id"],
                values["cron"],
                values["timezone"],
                values["next_run_at"],
                values["enabled"],
                values["max_attempts"],
            )

    async def list_schedules(self, workspace_id: str = "") -> list[asyncpg.Record]:
        with wrap_db_errors():
            return await self.pool.fetch(QUERIES["list_schedules"], workspace_id)

    async def update_schedule(
        self, schedule_id: str, change: Callable[[asyncpg.Record], dict[str, object]]
    ) -> asyncpg.Record:
        """Lock a user schedule, compute its new values from the current row, write them."""
        key = parse_id(schedule_id, ScheduleNotFound)
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                current = await conn.fetchrow(QUERIES["lock_user_schedule"], key)
                if current is None:
                    raise ScheduleNotFound()
                values = change(current)
                return await conn.fetchrow(
                    QUERIES["update_schedule"],
                    key,
                    values["name"],
                    values["prompt"],
                    values["model"],
                    values["session_id"],
                    values["cron"],
                    values["timezone"],
                    values["next_run_at"],
                    values["enabled"],
                    values["max_attempts"],
                )

    async def delete_schedule(self, schedule_id: str) -> None:
        key = parse_id(schedule_id, ScheduleNotFound)
        with wrap_db_errors():
            if await self.pool.fetchval(QUERIES["delete_schedule"], key) is None:
                raise ScheduleNotFound()

    async def materialize_due(
        self, ticks_for: Callable[[asyncpg.Record], tuple[list[datetime], datetime | None]], limit: int
    ) -> int:
        """Materialize due ticks of up to `limit` schedules; returns how many tasks were created.

        Each due schedule stays locked (SKIP LOCKED for other replicas) while its ticks are
        inserted and its next run advanced; the wake-up goes out only after the commit.
        """
        created = 0
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                for schedule in await conn.fetch(QUERIES["lock_due_schedules"], limit):
                    ticks, next_run_at = ticks_for(schedule)
                    if ticks:
                        inserted = await conn.fetch(QUERIES["materialize_ticks"], schedule["id"], ticks)
                        created += len(inserted)
                    await conn.execute(
                        QUERIES["advance_schedule"],
                        schedule["id"],
                        next_run_at,
                        ticks[-1] if ticks else schedule["last_tick"],
                    )
                if created:
                    await bus.enqueue_event(
                        cast(asyncpg.Connection, conn),
                        subjects.TASK_ENQUEUED,
                        events_pb2.TaskEnqueued(task_id="").SerializeToString(),
                    )
        if created:
            await self._after_enqueue("schedule")
        return created

    async def next_schedule_due(self) -> datetime | None:
        with wrap_db_errors():
            return await self.pool.fetchval(QUERIES["next_schedule_due"])


async def _enqueue_fact(conn: Conn, task_id: uuid.UUID) -> None:
    await bus.enqueue_event(
        cast(asyncpg.Connection, conn),
        subjects.TASK_ENQUEUED,
        events_pb2.TaskEnqueued(task_id=str(task_id)).SerializeToString(),
    )


async def _progress(conn: Conn, entries: Sequence[tuple[uuid.UUID, int, str, str]]) -> None:
    if not entries:
        return
    await conn.execute(
        QUERIES["insert_progress"],
        [entry[0] for entry in entries],
        [entry[1] for entry in entries],
        [entry[2] for entry in entries],
        [truncate(entry[3], MAX_ERROR_CHARS) for entry in entries],
    )


def _recovery_entry(row: asyncpg.Record, why: str) -> tuple[uuid.UUID, int, str, str]:
    status = Status(row["status"])
    attempt = row["attempt_count"]
    of = f"attempt {attempt}/{row['max_attempts']}"
    if status is Status.QUEUED:
        return (row["id"], attempt, "recovered", f"{why} during {of}; requeued")
    if status is Status.DEAD_LETTER:
        return (row["id"], attempt, "dead_letter", f"{why} during {of}; no attempts left: dead-lettered")
    if status is Status.FAILED:
        return (row["id"], attempt, "failed", f"{why} during {of} too long ago to replay: failed as stale")
    return (row["id"], attempt, "cancelled", f"{why} while cancelling; cancelled")


async def _terminal_followups(conn: Conn, rows: Sequence[asyncpg.Record], *, wake_queued: bool) -> list[Transition]:
    """Inside the transition's transaction: one remediation per terminal failure of a task,
    and the wake-up fact when that (or requeued work, if `wake_queued`) is due now."""
    transitions = []
    remediated = False
    for row in rows:
        remediation_id = None
        if row["kind"] == Kind.TASK and row["status"] in (Status.FAILED, Status.DEAD_LETTER):
            remediation_id = await conn.fetchval(QUERIES["insert_remediation"], row["id"], remediation_prompt(row))
            if remediation_id is not None:
                remediated = True
                await _progress(
                    conn,
                    [(row["id"], row["attempt_count"], "remediation", f"remediation task {remediation_id} created")],
                )
        transitions.append(Transition(row, remediation_id))
    if remediated or (wake_queued and any(row["status"] == Status.QUEUED for row in rows)):
        await _enqueue_fact(conn, rows[0]["id"])
    return transitions
