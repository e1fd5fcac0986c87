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
from popagent_core.db import load_queries, record_of, wrap_db_errors
from popagent_core.errors import Conflict, FailedPrecondition, NotFound, PermissionDenied
from popagent_tasks.model import (
    MAX_ERROR_CHARS,
    MAX_OUTCOME_CHARS,
    ApprovalWait,
    Kind,
    Schedule,
    ScheduleFields,
    SelfUpdateSlot,
    Source,
    Status,
    Task,
    TaskChannel,
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


def remediation_prompt(task: Task) -> str:
    return (
        f"Background task {task.id} in workspace {task.workspace_id} ended {task.status} "
        f"after attempt {task.attempt_count} of {task.max_attempts} "
        f"({task.last_error_class or 'unknown'}: {task.last_error or 'no detail'}).\n"
        "Investigate why it failed, fix what is within reach, and report what you found and did. "
        "Do not simply rerun the original work.\n\n"
        f"Original prompt:\n{truncate(task.prompt, 8 * 1024)}"
    )


def _task(row: asyncpg.Record) -> Task:
    """The one mapping of a task row (the column list every task query names) to its record."""
    return record_of(Task, row, kind=Kind(row["kind"]), status=Status(row["status"]), source=Source(row["source"]))


def _schedule(row: asyncpg.Record) -> Schedule:
    return record_of(Schedule, row, source=Source(row["source"]))


def _schedule_args(fields: ScheduleFields) -> tuple[object, ...]:
    """A schedule write's values in the order insert_schedule and update_schedule take them."""
    return (
        fields.name,
        fields.prompt,
        fields.model,
        fields.session_id,
        fields.cron,
        fields.timezone,
        fields.next_run_at,
        fields.enabled,
        fields.max_attempts,
    )


@dataclass(frozen=True, slots=True)
class Transition:
    """A committed change of one attempt's task, and the remediation it created, if any."""

    task: Task
    remediation_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
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
        self,
        *,
        source: str,
        workspace_id: str,
        prompt: str,
        model: str,
        session_id: str,
        max_attempts: int,
        channel: TaskChannel | None = None,
    ) -> Task:
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                task = _task(
                    await conn.fetchrow(
                        QUERIES["insert_task"], source, workspace_id, prompt, model, session_id, max_attempts
                    )
                )
                if channel is not None:
                    await conn.execute(
                        QUERIES["insert_task_channel"],
                        task.id,
                        channel.connection_id,
                        channel.conversation,
                        channel.thread,
                    )
                await _enqueue_fact(conn, task.id)
        await self._after_enqueue(str(task.id))
        return task

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

    async def channel_of(self, task_id: str) -> TaskChannel | None:
        """Where the task's result is posted, if anywhere."""
        with wrap_db_errors():
            row = await self.pool.fetchrow(QUERIES["task_channel"], parse_id(task_id, TaskNotFound))
        return record_of(TaskChannel, row) if row is not None else None

    async def get_task(self, task_id: str) -> Task:
        with wrap_db_errors():
            row = await self.pool.fetchrow(QUERIES["get_task"], parse_id(task_id, TaskNotFound))
        if row is None:
            raise TaskNotFound()
        return _task(row)

    async def list_tasks(self, *, limit: int, workspace_id: str = "", status: str = "") -> list[Task]:
        with wrap_db_errors():
            rows = await self.pool.fetch(QUERIES["list_tasks"], limit, workspace_id, status)
        return [_task(row) for row in rows]

    async def recent_progress(self, task_ids: Sequence[uuid.UUID], per_task: int) -> dict[uuid.UUID, list[Progress]]:
        with wrap_db_errors():
            rows = await self.pool.fetch(QUERIES["recent_progress"], list(task_ids), per_task)
        progress: dict[uuid.UUID, list[Progress]] = {}
        for row in rows:
            progress.setdefault(row["task_id"], []).append(Progress(row["attempt"], row["kind"], row["message"]))
        return progress

    async def cancel_task(self, task_id: str) -> Task:
        key = parse_id(task_id, TaskNotFound)
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                row = await conn.fetchrow(QUERIES["cancel_task"], key)
                if row is not None:
                    task = _task(row)
                    kind = "cancelled" if task.status is Status.CANCELLED else "cancel_requested"
                    message = (
                        "cancelled before it started"
                        if kind == "cancelled"
                        else "cancellation requested; durable once the executor settles"
                    )
                    await _progress(conn, [(key, task.attempt_count, kind, message)])
                    return task
                current = await conn.fetchrow(QUERIES["get_task"], key)
        if current is None:
            raise TaskNotFound()
        task = _task(current)
        if task.status is Status.CANCELLING:
            return task
        raise TaskNotCancellable(f"task is {task.status}")

    async def resolve_task(self, task_id: str, evidence: str) -> Task:
        key = parse_id(task_id, TaskNotFound)
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                row = await conn.fetchrow(QUERIES["resolve_task"], key, evidence)
                if row is not None:
                    task = _task(row)
                    await _progress(conn, [(key, task.attempt_count, "resolved", f"resolved by operator: {evidence}")])
                    return task
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

    async def claim(self, worker_id: str, limit: int) -> list[Task]:
        with wrap_db_errors():
            rows = await self.pool.fetch(QUERIES["claim_tasks"], worker_id, limit)
        return [_task(row) for row in rows]

    async def heartbeat(self, held: Sequence[tuple[uuid.UUID, int]]) -> dict[uuid.UUID, Status]:
        """Owned attempts still live, by id -> status."""
        with wrap_db_errors():
            rows = await self.pool.fetch(
                QUERIES["heartbeat"], [task_id for task_id, _ in held], [attempt for _, attempt in held]
            )
        return {row["id"]: Status(row["status"]) for row in rows}

    async def attempt_progress(self, task_id: uuid.UUID, attempt: int, kind: str, message: str) -> bool:
        with wrap_db_errors():
            inserted = await self.pool.fetchval(
                QUERIES["insert_attempt_progress"], task_id, attempt, kind, truncate(message, MAX_ERROR_CHARS)
            )
        return inserted is not None

    async def attempt_approval_wait(self, task_id: uuid.UUID, attempt: int, wait: ApprovalWait | None) -> bool:
        """Show the approval the attempt waits for (None: it waits for none); False once the attempt no
        longer owns the task."""
        with wrap_db_errors():
            updated = await self.pool.fetchval(
                QUERIES["attempt_approval_wait"],
                task_id,
                attempt,
                wait.approval_id if wait else None,
                wait.tool_name if wait else None,
                wait.since if wait else None,
            )
        return updated is not None

    async def complete(self, done: Sequence[tuple[uuid.UUID, int, str]]) -> list[Task]:
        """Fenced completions in one statement; returns the tasks that changed."""
        with wrap_db_errors():
            rows = await self.pool.fetch(
                QUERIES["complete_attempts"],
                [task_id for task_id, _, _ in done],
                [attempt for _, attempt, _ in done],
                [truncate(outcome, MAX_OUTCOME_CHARS) for _, _, outcome in done],
            )
        return [_task(row) for row in rows]

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
                task = _task(row)
                head = f"attempt {attempt}/{task.max_attempts} failed ({error_class}): {message}"
                if task.status is Status.QUEUED:
                    kind, note = "retry_scheduled", f"{head}; retrying in {delay_s:.1f} s"
                elif task.status is Status.DEAD_LETTER:
                    kind = "dead_letter"
                    note = f"{head}; retries exhausted after {attempt} attempts: dead-lettered, not retried again"
                elif task.status is Status.CANCELLED:
                    kind, note = "cancelled", f"cancelled; the executor settled with {error_class}: {message}"
                else:
                    kind, note = "failed", f"{head}; not retried: {explain}"
                await _progress(conn, [(task_id, attempt, kind, note)])
                transition = (await _terminal_followups(conn, [task], wake_queued=False))[0]
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
        return Transition(_task(row))

    async def release(
        self,
        held: Sequence[tuple[uuid.UUID, int]],
        *,
        counted: bool = False,
        error_class: str = "shutdown",
        message: str = "the worker stopped while the attempt ran",
        delay_s: float = 0.0,
    ) -> list[Transition]:
        """Interrupted attempts back to the queue after `delay_s` (or dead letter when a counted
        release exhausts them). A shutdown (`counted` False) never uses up an attempt."""
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                rows = await conn.fetch(
                    QUERIES["release_attempts"],
                    [task_id for task_id, _ in held],
                    [attempt for _, attempt in held],
                    counted,
                    error_class,
                    message,
                    delay_s,
                )
                tasks = [_task(row) for row in rows]
                await _progress(conn, [_recovery_entry(task, message) for task in tasks])
                transitions = await _terminal_followups(conn, tasks, wake_queued=True)
        if any(t.remediation_id or t.task.status is Status.QUEUED for t in transitions):
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
                tasks = [_task(row) for row in rows]
                await _progress(conn, [_recovery_entry(task, "its worker stopped heartbeating") for task in tasks])
                transitions = await _terminal_followups(conn, tasks, wake_queued=True)
        if any(t.remediation_id or t.task.status is Status.QUEUED for t in transitions):
            await self._after_enqueue("recovered")
        return transitions

    # -- schedules ------------------------------------------------------------------

    async def insert_schedule(
        self, workspace_id: str, fields: ScheduleFields, channel: TaskChannel | None = None
    ) -> Schedule:
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                row = await conn.fetchrow(QUERIES["insert_schedule"], workspace_id, *_schedule_args(fields))
                if channel is not None:
                    await _set_schedule_channel(conn, row["id"], channel)
        return _schedule(row)

    async def schedule_channels(self, schedule_ids: Sequence[uuid.UUID]) -> dict[str, TaskChannel]:
        """Where each of these schedules' runs post their results, by schedule id (none: not listed)."""
        with wrap_db_errors():
            rows = await self.pool.fetch(QUERIES["schedule_channels"], list(schedule_ids))
        return {
            row["schedule_id"]: TaskChannel(row["connection_id"], row["conversation"], row["thread"]) for row in rows
        }

    async def list_schedules(self, workspace_id: str = "") -> list[Schedule]:
        with wrap_db_errors():
            rows = await self.pool.fetch(QUERIES["list_schedules"], workspace_id)
        return [_schedule(row) for row in rows]

    async def update_schedule(
        self,
        schedule_id: str,
        change: Callable[[Schedule], ScheduleFields],
        channel: TaskChannel | None = None,
        remove_channel: bool = False,
    ) -> Schedule:
        """Lock a user schedule, compute its new values from the current one, write them (and its channel:
        set when given, removed when asked, else kept)."""
        key = parse_id(schedule_id, ScheduleNotFound)
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                current = await conn.fetchrow(QUERIES["lock_user_schedule"], key)
                if current is None:
                    await _refuse_system_schedule(conn, key, "changed")
                    raise ScheduleNotFound()
                fields = change(_schedule(current))
                row = await conn.fetchrow(QUERIES["update_schedule"], key, *_schedule_args(fields))
                if channel is not None:
                    await _set_schedule_channel(conn, key, channel)
                elif remove_channel:
                    await conn.execute(QUERIES["remove_schedule_channel"], key)
        return _schedule(row)

    async def delete_schedule(self, schedule_id: str) -> None:
        key = parse_id(schedule_id, ScheduleNotFound)
        with wrap_db_errors():
            if await self.pool.fetchval(QUERIES["delete_schedule"], key) is None:
                await _refuse_system_schedule(self.pool, key, "deleted")
                raise ScheduleNotFound()

    async def reconcile_self_update(self, desired: Sequence[SelfUpdateSlot], timezone: str) -> list[Schedule]:
        """Make the system schedules exactly `desired` (one per workspace), in one transaction under
        an advisory lock: concurrent reconcilers on any replica run one after another, and the
        partial unique index makes a second insert for a workspace land on the same row."""
        wanted = {slot.workspace_id: slot for slot in desired}
        kept: list[Schedule] = []
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                await conn.execute(QUERIES["lock_self_update_reconcile"])
                for row in await conn.fetch(QUERIES["list_self_update_schedules"]):
                    if row["workspace_id"] not in wanted:
                        await conn.execute(QUERIES["delete_self_update_schedule"], row["id"])
                for slot in wanted.values():
                    row = await conn.fetchrow(
                        QUERIES["upsert_self_update_schedule"],
                        slot.workspace_id,
                        slot.name,
                        slot.prompt,
                        slot.cron,
                        timezone,
                        slot.next_run_at,
                        slot.max_attempts,
                    )
                    kept.append(_schedule(row))
        return kept

    async def materialize_due(
        self,
        ticks_for: Callable[[Schedule], tuple[list[datetime], datetime | None]],
        limit: int,
        self_update_allowed: Callable[[], Awaitable[bool]] | None = None,
    ) -> int:
        """Materialize due ticks of up to `limit` schedules; returns how many tasks were created.

        Each due schedule stays locked (SKIP LOCKED for other replicas) while its ticks are
        inserted and its next run advanced; the wake-up goes out only after the commit. A
        self-update schedule's ticks become tasks only when `self_update_allowed` answers yes,
        asked while the row is locked (no answer: none), so turning self-update off stops new
        work before the next reconcile removes the schedule; its skipped ticks are not replayed.
        """
        created = 0
        allowed: bool | None = None
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                for row in await conn.fetch(QUERIES["lock_due_schedules"], limit):
                    schedule = _schedule(row)
                    ticks, next_run_at = ticks_for(schedule)
                    if ticks and schedule.source is Source.SELF_UPDATE:
                        if allowed is None:
                            allowed = self_update_allowed is not None and await self_update_allowed()
                        if not allowed:
                            await conn.execute(QUERIES["advance_schedule"], schedule.id, next_run_at, ticks[-1])
                            continue
                    if ticks:
                        inserted = await conn.fetch(QUERIES["materialize_ticks"], schedule.id, ticks)
                        created += len(inserted)
                        if inserted:
                            await conn.execute(
                                QUERIES["inherit_schedule_channel"], schedule.id, [r["id"] for r in inserted]
                            )
                    await conn.execute(
                        QUERIES["advance_schedule"],
                        schedule.id,
                        next_run_at,
                        ticks[-1] if ticks else schedule.last_tick,
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


async def _set_schedule_channel(conn: Conn, schedule_id: uuid.UUID, channel: TaskChannel) -> None:
    await conn.execute(
        QUERIES["set_schedule_channel"], schedule_id, channel.connection_id, channel.conversation, channel.thread
    )


async def _refuse_system_schedule(conn: Conn | asyncpg.Pool, key: uuid.UUID, verb: str) -> None:
    """A system row is not missing: say whose it is and where it is changed."""
    if await conn.fetchval(QUERIES["schedule_source"], key) == Source.SELF_UPDATE:
        raise PermissionDenied(
            f"schedule {key} is the self-update scheduler's and cannot be {verb} here; "
            "it follows the autonomy settings (PUT /api/settings/autonomy)"
        )


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


def _recovery_entry(task: Task, why: str) -> tuple[uuid.UUID, int, str, str]:
    attempt = task.attempt_count
    of = f"attempt {attempt}/{task.max_attempts}"
    if task.status is Status.QUEUED:
        return (task.id, attempt, "recovered", f"{why} during {of}; requeued")
    if task.status is Status.DEAD_LETTER:
        return (task.id, attempt, "dead_letter", f"{why} during {of}; no attempts left: dead-lettered")
    if task.status is Status.FAILED:
        return (task.id, attempt, "failed", f"{why} during {of} too long ago to replay: failed as stale")
    return (task.id, attempt, "cancelled", f"{why} while cancelling; cancelled")


async def _terminal_followups(conn: Conn, tasks: Sequence[Task], *, wake_queued: bool) -> list[Transition]:
    """Inside the transition's transaction: one remediation per terminal failure of a task,
    and the wake-up fact when that (or requeued work, if `wake_queued`) is due now."""
    transitions = []
    remediated = False
    for task in tasks:
        remediation_id = None
        if task.kind is Kind.TASK and task.status in (Status.FAILED, Status.DEAD_LETTER):
            remediation_id = await conn.fetchval(QUERIES["insert_remediation"], task.id, remediation_prompt(task))
            if remediation_id is not None:
                remediated = True
                await _progress(
                    conn,
                    [(task.id, task.attempt_count, "remediation", f"remediation task {remediation_id} created")],
                )
        transitions.append(Transition(task, remediation_id))
    if remediated or (wake_queued and any(task.status is Status.QUEUED for task in tasks)):
        await _enqueue_fact(conn, tasks[0].id)
    return transitions
