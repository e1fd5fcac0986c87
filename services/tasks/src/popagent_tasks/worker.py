"""The worker runtime: claims due tasks, runs each attempt through the executor, keeps it
alive with heartbeats, and makes every outcome durable before anyone hears of it.

Per attempt:
  claim (one statement, attempt number +1 = fencing token) -> TaskStart -> execute
  -> [timeout / cancel / shutdown / lost claim: abort, wait `abort_ack_s` holding the slot]
  -> fenced durable transition (+ remediation in the same transaction) -> TaskStop -> free slot.

The deadline (`task_timeout_s`) stops while the attempt's turn waits for a person to answer a tool
call's approval (the executor reports each wait) and moves on by the time it waited; the task shows
the wait, and the heartbeat goes on, so no sweep takes the waiting attempt for a dead one.

An executor that does not settle within the acknowledgement interval gets an
`interrupted` TaskStop; its task stays `running`/`cancelling`, keeps its slot and its
heartbeat (so no sweep, here or elsewhere, recovers it into an overlapping retry) until
it settles. Start and stop are serialized; a stop that arrives during start lets the
recovery pass finish and then keeps polling from starting.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Generic, TypeVar

from popagent_core.lifecycle import wait_event
from popagent_core.telemetry import TRACER, continuing_trace
from popagent_tasks.executor import (
    AbortReason,
    AbortSignal,
    ApprovalWaitReport,
    Attempt,
    Executor,
    TaskFailure,
    classify,
)
from popagent_tasks.model import (
    RELEASED,
    TRANSIENT,
    ApprovalWait,
    Backoff,
    ErrorClass,
    Source,
    Status,
    Task,
    retry_eligible,
    truncate,
)
from popagent_tasks.observer import Observers, StopStatus, TaskLifecycle, TaskStarted, TaskStopped, TaskWaiting
from popagent_tasks.repo import TaskRepo, Transition
from popagent_tasks.settings import Settings

logger = logging.getLogger(__name__)

T = TypeVar("T")
Item = TypeVar("Item")
Result = TypeVar("Result")

MAX_TRANSITION_BATCH = 500
# Transitions are retried through database outages; the attempt keeps its slot and heartbeat meanwhile.
TRANSITION_RETRY_MAX_S = 2.0


@dataclass(frozen=True)
class RuntimeConfig:
    concurrency: int = 10
    claim_batch: int = 50
    task_timeout_s: float = 1800.0
    abort_ack_s: float = 10.0
    heartbeat_interval_s: float = 2.0
    heartbeat_timeout_s: float = 20.0
    stale_after_s: float = 6 * 3600.0
    poll_interval_s: float = 1.0
    sweep_interval_s: float = 5.0
    backoff: Backoff = field(default_factory=lambda: Backoff(5.0, 300.0))
    shutdown_grace_s: float = 10.0
    sweep_batch: int = 500

    @classmethod
    def from_settings(cls, settings: Settings) -> RuntimeConfig:
        return cls(
            concurrency=settings.concurrency,
            claim_batch=settings.claim_batch,
            task_timeout_s=settings.task_timeout_s,
            abort_ack_s=settings.abort_ack_s,
            heartbeat_interval_s=settings.heartbeat_interval_s,
            heartbeat_timeout_s=settings.heartbeat_timeout_s,
            stale_after_s=settings.stale_after_s,
            poll_interval_s=settings.poll_interval_s,
            sweep_interval_s=settings.sweep_interval_s,
            backoff=Backoff(settings.retry_base_s, settings.retry_cap_s),
            shutdown_grace_s=settings.shutdown_grace_s,
        )


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def stop_event(transition: Transition, lifecycle: TaskLifecycle) -> TaskStopped:
    """The TaskStop that reports a committed transition (never anything else)."""
    task = transition.task
    status = task.status
    extra = {"remediationTaskId": str(transition.remediation_id)} if transition.remediation_id else {}
    if status is Status.COMPLETED:
        return TaskStopped(lifecycle, StopStatus.COMPLETED, outcome=task.outcome or "")
    if status is Status.CANCELLED:
        return TaskStopped(lifecycle, StopStatus.CANCELLED)
    error_class, error = task.last_error_class or "", task.last_error or ""
    if status is Status.QUEUED:
        next_at = task.next_attempt_at
        retry = {"nextAttemptAt": next_at.isoformat()} if next_at else {}
        return TaskStopped(
            lifecycle, StopStatus.FAILED, error_class=error_class, error=error, will_retry=True, extra=retry
        )
    stop_status = StopStatus.DEAD_LETTER if status is Status.DEAD_LETTER else StopStatus.FAILED
    return TaskStopped(lifecycle, stop_status, error_class=error_class, error=error, extra=extra)


def _explain(source: Source, error_class: ErrorClass) -> str:
    if error_class in TRANSIENT and source is Source.USER:
        return "user tasks are not replayed after an execution error"
    return f"{error_class} failures never retry"


@dataclass
class _Slot:
    task_record: Task
    attempt: Attempt
    lifecycle: TaskLifecycle
    abort: AbortSignal
    # time.monotonic() at which the attempt times out, not counting its approval waits.
    deadline: float
    task: asyncio.Task[None] | None = None
    # The executor settled; the attempt is only waiting for its durable transition.
    settled: bool = False
    # The approvals the attempt's turn waits for, oldest first. A person's answer takes as long as it
    # takes (the approval's own expiry bounds it), so the deadline stops while any is waited for.
    waits: dict[str, ApprovalWait] = field(default_factory=dict[str, ApprovalWait])
    paused_at: float | None = None
    # Set whenever the deadline stops or moves on, so the attempt's wait for it looks again.
    deadline_moved: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def key(self) -> tuple[uuid.UUID, int]:
        return self.task_record.attempt_key

    def remaining(self) -> float | None:
        """Seconds until the deadline; None while the deadline is stopped."""
        if self.paused_at is not None:
            return None
        return max(self.deadline - time.monotonic(), 0.0)

    def approval_wait(self, report: ApprovalWaitReport) -> ApprovalWait | None:
        """Apply a wait's start or end to the deadline; the wait the task shows now (the oldest)."""
        if report.waiting:
            if self.paused_at is None:
                self.paused_at = time.monotonic()
            if report.approval_id not in self.waits:
                self.waits[report.approval_id] = ApprovalWait(report.approval_id, report.tool_name, datetime.now(UTC))
        else:
            self.waits.pop(report.approval_id, None)
            if not self.waits and self.paused_at is not None:
                # The time spent waiting is added back.
                self.deadline += time.monotonic() - self.paused_at
                self.paused_at = None
        self.deadline_moved.set()
        return next(iter(self.waits.values()), None)


class _StatementBatcher(Generic[Item, Result]):
    """Transitions that arrive while one statement is being written go out together in the
    next statement; the first one is never held back to build a batch. Attempts that settle
    at once (a burst of completions, every attempt a shutdown aborted) then cost a few
    statements instead of one transaction each queueing for the pool."""

    def __init__(self, write: Callable[[list[Item]], Awaitable[dict[uuid.UUID, Result]]], *, name: str) -> None:
        self._write = write
        self._name = name
        self._pending: list[tuple[uuid.UUID, Item, asyncio.Future[Result | None]]] = []
        self._flusher: asyncio.Task[None] | None = None

    async def submit(self, task_id: uuid.UUID, item: Item) -> Result | None:
        """The transition's result for this task, or None when it changed nothing (fenced out)."""
        future: asyncio.Future[Result | None] = asyncio.get_running_loop().create_future()
        self._pending.append((task_id, item, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush(), name=self._name)
        return await future

    async def _flush(self) -> None:
        while self._pending:
            batch = self._pending[:MAX_TRANSITION_BATCH]
            del self._pending[:MAX_TRANSITION_BATCH]
            try:
                by_id = await self._write([item for _, item, _ in batch])
            except Exception as exc:
                for *_, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for task_id, _, future in batch:
                if not future.done():
                    future.set_result(by_id.get(task_id))


class Worker:
    def __init__(
        self,
        repo: TaskRepo,
        executor: Executor,
        observers: Observers,
        config: RuntimeConfig,
        *,
        worker_id: str | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.repo = repo
        self.executor = executor
        self.observers = observers
        self.config = config
        # This process's own settings: the base every runtime read from agent-runner refines.
        self._settings_config = config
        self._refreshing = asyncio.Lock()
        self.worker_id = worker_id or default_worker_id()
        self.rng = rng or random.Random()
        self.slots: dict[uuid.UUID, _Slot] = {}
        # Needs-you notices on their way (they never hold up the attempt's stream).
        self._notices: set[asyncio.Task[None]] = set()
        self._completions = _StatementBatcher[tuple[uuid.UUID, int, str], Task](
            self._write_completions, name="tasks-complete"
        )
        self._shutdown_releases = _StatementBatcher[tuple[uuid.UUID, int], Transition](
            self._write_shutdown_releases, name="tasks-release"
        )
        self._wake = asyncio.Event()
        self._lifecycle = asyncio.Lock()
        self._wanted = False
        self._running = False
        self._loops: list[asyncio.Task[None]] = []
        self._heartbeat: asyncio.Task[None] | None = None
        self._next_retry_at: float | None = None
        self.recovery_passes = 0

    # -- lifecycle ----------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._running

    async def start(self) -> None:
        """One recovery pass, then claim and sweep until `stop`. Idempotent."""
        self._wanted = True
        async with self._lifecycle:
            if self._running:
                return
            await self._configure()
            await self.recover()
            if not self._wanted:
                # A stop arrived during start: the recovery pass finished, nothing else starts.
                return
            self._running = True
            self._ensure_heartbeat()
            self._loops = [
                asyncio.create_task(self._claim_loop(), name="tasks-claim"),
                asyncio.create_task(self._sweep_loop(), name="tasks-sweep"),
            ]

    async def _configure(self) -> None:
        """An executor that knows where the runtime settings live (agent-runner's) supplies them."""
        if not await self.refresh_runtime():
            logger.info(
                "worker runtime from POPAGENT_TASKS_* settings (no agent-runner configured)",
                extra={"concurrency": self.config.concurrency, "task_timeout_s": self.config.task_timeout_s},
            )

    async def refresh_runtime(self) -> bool:
        """Re-read the runtime from the executor's source (agent-runner's settings) and apply
        it; False when the executor has none. Refreshes run one at a time, so the last read wins."""
        runtime_config = getattr(self.executor, "runtime_config", None)
        if runtime_config is None:
            return False
        async with self._refreshing:
            self.reconfigure(await runtime_config(self._settings_config))
        return True

    def reconfigure(self, config: RuntimeConfig) -> None:
        """Apply a new runtime while running. Running attempts keep their slots and their
        deadlines; new claims, new attempts' deadlines, retries, heartbeats and polling use
        the new values. More slots are claimed at once; fewer are reached as attempts end."""
        previous, self.config = self.config, config
        if config != previous:
            logger.info(
                "worker runtime changed",
                extra={"concurrency": config.concurrency, "task_timeout_s": config.task_timeout_s},
            )
            self.wake()

    async def stop(self) -> None:
        """Stop claiming, let in-flight attempts finish within the grace period, then abort
        the rest and wait the acknowledgement interval. Hung executors keep their slots."""
        self._wanted = False
        async with self._lifecycle:
            if not self._running:
                return
            self._running = False
            for loop_task in self._loops:
                loop_task.cancel()
            for loop_task in self._loops:
                with contextlib.suppress(asyncio.CancelledError):
                    await loop_task
            self._loops = []
            in_flight = self._attempt_tasks()
            if in_flight and self.config.shutdown_grace_s > 0:
                await asyncio.wait(in_flight, timeout=self.config.shutdown_grace_s)
            for slot in list(self.slots.values()):
                slot.abort.abort(AbortReason.SHUTDOWN)
            in_flight = self._attempt_tasks()
            if in_flight:
                # The margin covers the transition of executors that settle at the last moment.
                await asyncio.wait(in_flight, timeout=self.config.abort_ack_s + 0.5)

    async def close(self) -> None:
        """Process teardown after `stop`: drop whatever is still hung (its heartbeat stops,
        so another worker recovers it once it is stale)."""
        await self.stop()
        tasks = [*self._attempt_tasks(), *([self._heartbeat] if self._heartbeat else [])]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        aclose = getattr(self.executor, "aclose", None)
        if aclose is not None:
            await aclose()

    def wake(self, *_: object) -> None:
        """New work may be due (the task-enqueued fact, or a local change)."""
        self._wake.set()

    def _attempt_tasks(self) -> list[asyncio.Task[None]]:
        return [slot.task for slot in self.slots.values() if slot.task is not None and not slot.task.done()]

    def _ensure_heartbeat(self) -> None:
        if self._heartbeat is None or self._heartbeat.done():
            self._heartbeat = asyncio.create_task(self._heartbeat_loop(), name="tasks-heartbeat")

    # -- recovery -----------------------------------------------------------------

    async def recover(self) -> list[Transition]:
        """One recovery pass over orphans of dead workers (never this worker's own slots)."""
        transitions: list[Transition] = []
        while True:
            batch = await self.repo.recover_orphans(
                heartbeat_timeout_s=self.config.heartbeat_timeout_s,
                stale_after_s=self.config.stale_after_s,
                exclude=list(self.slots),
                limit=self.config.sweep_batch,
            )
            transitions += batch
            for transition in batch:
                task = transition.task
                logger.info(
                    "orphaned attempt recovered",
                    extra={"task_id": str(task.id), "attempt": task.attempt_count, "status": task.status.value},
                )
                await self.observers.task_stopped(stop_event(transition, TaskLifecycle.of(task)))
            if len(batch) < self.config.sweep_batch:
                break
        self.recovery_passes += 1
        if any(t.task.status is Status.QUEUED or t.remediation_id for t in transitions):
            self.wake()
        return transitions

    async def _sweep_loop(self) -> None:
        while self._running:
            await asyncio.sleep(self.config.sweep_interval_s)
            try:
                await self.recover()
            except Exception:
                logger.warning("recovery sweep failed; retrying", exc_info=True)

    # -- claiming -----------------------------------------------------------------

    async def _claim_loop(self) -> None:
        failures = 0
        while self._running:
            self._wake.clear()
            free = self.config.concurrency - len(self.slots)
            if free > 0:
                want = min(free, self.config.claim_batch)
                try:
                    claimed = await self.repo.claim(self.worker_id, want)
                except Exception:
                    # Any failure, not only the mapped ones (asyncpg raises InternalClientError
                    # when a severed connection is released): a claim loop that died would
                    # leave this worker silently idle.
                    failures += 1
                    logger.warning("claim failed; retrying", exc_info=True)
                    await asyncio.sleep(min(0.1 * 2**failures, self.config.poll_interval_s))
                    continue
                failures = 0
                for task in claimed:
                    self._start_attempt(task)
                if len(claimed) == want:
                    continue
            timeout = self.config.poll_interval_s
            if self._next_retry_at is not None:
                until_retry = self._next_retry_at - time.monotonic()
                if until_retry <= 0:
                    self._next_retry_at = None
                    continue
                timeout = min(timeout, until_retry)
            await wait_event(self._wake, timeout)

    def _start_attempt(self, task: Task) -> None:
        task_id, attempt_number = task.attempt_key

        async def report_progress(message: str) -> None:
            await self.repo.attempt_progress(task_id, attempt_number, "progress", message)

        async def report_approval_wait(report: ApprovalWaitReport) -> None:
            shown = slot.approval_wait(report)
            try:
                await self.repo.attempt_approval_wait(task_id, attempt_number, shown)
            except Exception:
                # Only what the task shows: the deadline already stopped or moved on, and a person
                # may be about to answer, so the attempt goes on; the next wait or transition rewrites it.
                logger.warning("approval wait not shown on the task", extra={"task_id": str(task_id)}, exc_info=True)
            if report.waiting:
                # Best effort, after the wait is shown: a needs-you notice where the task reports.
                notice = asyncio.create_task(
                    self.observers.task_waiting(TaskWaiting(slot.lifecycle, report.approval_id, report.tool_name)),
                    name=f"task-{task_id}-needs-you",
                )
                self._notices.add(notice)
                notice.add_done_callback(self._notices.discard)

        slot = _Slot(
            task_record=task,
            attempt=Attempt.of(task, report_progress, report_approval_wait),
            lifecycle=TaskLifecycle.of(task),
            abort=AbortSignal(),
            deadline=time.monotonic() + self.config.task_timeout_s,
        )
        self.slots[task_id] = slot
        slot.task = asyncio.create_task(self._run_attempt(slot), name=f"task-{task_id}-{attempt_number}")

    # -- one attempt --------------------------------------------------------------

    async def _run_attempt(self, slot: _Slot) -> None:
        task_id, attempt = slot.key
        # The attempt's spans (its TaskStart/TaskStop hooks, its turn) join the trace its claim named.
        with TRACER.start_as_current_span(
            "task.attempt",
            context=continuing_trace(slot.task_record.trace_id),
            attributes={"popagent.task.id": str(task_id), "popagent.task.attempt": attempt},
        ):
            await self._attempt(slot)

    async def _attempt(self, slot: _Slot) -> None:
        try:
            await self.observers.task_started(TaskStarted(slot.lifecycle, slot.attempt.prompt))
            execution = asyncio.create_task(self.executor.execute(slot.attempt, slot.abort))
            aborted = asyncio.create_task(slot.abort.wait())
            try:
                await self._until_deadline(slot, execution, aborted)
            finally:
                aborted.cancel()
            if not execution.done():
                slot.abort.abort(AbortReason.TIMEOUT)
                await asyncio.wait({execution}, timeout=self.config.abort_ack_s)
                if not execution.done():
                    await self._interrupted(slot)
                    # Keep the slot (and the heartbeat) until the executor finally settles.
                    await asyncio.wait({execution})
            slot.settled = True
            await self._settle(slot, execution)
        finally:
            self.slots.pop(slot.key[0], None)
            self.wake()

    async def _until_deadline(
        self, slot: _Slot, execution: asyncio.Task[str], aborted: asyncio.Task[AbortReason]
    ) -> None:
        """Until the executor settles, an abort, or the deadline, which stops while the attempt waits for
        an approval and moves on by the time it waited: each change of it is looked at again."""
        while not (execution.done() or aborted.done()):
            slot.deadline_moved.clear()
            remaining = slot.remaining()
            if remaining == 0:
                return
            moved = asyncio.create_task(slot.deadline_moved.wait())
            try:
                await asyncio.wait({execution, aborted, moved}, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            finally:
                moved.cancel()

    async def _interrupted(self, slot: _Slot) -> None:
        reason = slot.abort.reason or AbortReason.TIMEOUT
        if reason is AbortReason.LOST_CLAIM:
            logger.warning("executor ignored the abort of a lost claim", extra={"task_id": slot.attempt.task_id})
            return
        task_id, attempt = slot.key
        logger.warning(
            "executor did not acknowledge abort; keeping its slot",
            extra={"task_id": str(task_id), "attempt": attempt, "reason": reason.value},
        )
        with contextlib.suppress(Exception):
            await self.repo.attempt_progress(
                task_id,
                attempt,
                "interrupted",
                f"abort ({reason}) not acknowledged within {self.config.abort_ack_s:g} s; "
                "the attempt keeps its slot until its executor settles",
            )
        await self.observers.task_stopped(TaskStopped(slot.lifecycle, StopStatus.INTERRUPTED, abort_reason=reason))

    async def _settle(self, slot: _Slot, execution: asyncio.Task[str]) -> None:
        task_id, attempt = slot.key
        reason = slot.abort.reason
        error = None if execution.cancelled() else execution.exception()
        transition: Transition | None
        if reason is AbortReason.LOST_CLAIM:
            logger.info("attempt lost its claim; its result is discarded", extra={"task_id": str(task_id)})
            return
        if reason is AbortReason.CANCELLED:
            transition = await self._durably(lambda: self.repo.settle_cancelled(task_id, attempt))
        elif error is None and not execution.cancelled() and reason is not AbortReason.TIMEOUT:
            # (A result that arrives after the deadline's abort is still a timeout: the
            # deadline decided, and the attempt becomes retry-eligible only now it settled.)
            outcome = truncate(str(execution.result() or ""), 16 * 1024)
            completed = await self._durably(lambda: self._completions.submit(task_id, (task_id, attempt, outcome)))
            transition = Transition(completed) if completed is not None else None
        elif reason is AbortReason.SHUTDOWN:
            transition = await self._durably(lambda: self._shutdown_releases.submit(task_id, (task_id, attempt)))
        elif reason is None and (released_class := classify(error or TaskFailure(ErrorClass.UNKNOWN))) in RELEASED:
            transition = await self._release(slot, released_class, str(error))
        else:
            error_class = (
                ErrorClass.TIMEOUT
                if reason is AbortReason.TIMEOUT
                else classify(error or TaskFailure(ErrorClass.UNKNOWN))
            )
            message = str(error) if error is not None else "the executor was cancelled"
            if reason is AbortReason.TIMEOUT:
                message = f"timed out after {self.config.task_timeout_s:g} s ({message})"
            source = slot.attempt.source
            eligible = retry_eligible(source, error_class)
            delay = self.config.backoff.delay(attempt, self.rng)
            transition = await self._durably(
                lambda: self.repo.fail(
                    task_id,
                    attempt,
                    error_class=error_class.value,
                    message=message,
                    retry_eligible=eligible,
                    delay_s=delay,
                    explain=_explain(source, error_class),
                )
            )
            if transition is not None and transition.task.status is Status.QUEUED:
                due = time.monotonic() + delay
                self._next_retry_at = min(self._next_retry_at or due, due)
        if transition is None:
            # Fenced out: another worker recovered and re-claimed this task meanwhile.
            logger.info(
                "stale attempt's transition changed nothing", extra={"task_id": str(task_id), "attempt": attempt}
            )
            return
        await self.observers.task_stopped(stop_event(transition, slot.lifecycle))

    async def _release(self, slot: _Slot, error_class: ErrorClass, message: str) -> Transition | None:
        """An attempt an orderly event interrupted (not an execution error): back to the queue.

        agent-runner's shutdown costs no attempt and requeues at once; the other classes
        count and wait the retry backoff, so an outage does not spin through attempts.
        """
        task_id, attempt = slot.key
        counted = error_class is not ErrorClass.SHUTDOWN
        delay = self.config.backoff.delay(attempt, self.rng) if counted else 0.0
        logger.info(
            "attempt interrupted; releasing it to the queue",
            extra={"task_id": str(task_id), "attempt": attempt, "error_class": error_class.value},
        )
        released = await self._durably(
            lambda: self.repo.release(
                [(task_id, attempt)],
                counted=counted,
                error_class=error_class.value,
                message=truncate(message or error_class.value, 2 * 1024),
                delay_s=delay,
            )
        )
        if released and released[0].task.status is Status.QUEUED:
            due = time.monotonic() + delay
            self._next_retry_at = min(self._next_retry_at or due, due)
        return released[0] if released else None

    async def _write_completions(self, items: list[tuple[uuid.UUID, int, str]]) -> dict[uuid.UUID, Task]:
        return {task.id: task for task in await self.repo.complete(items)}

    async def _write_shutdown_releases(self, items: list[tuple[uuid.UUID, int]]) -> dict[uuid.UUID, Transition]:
        return {transition.task.id: transition for transition in await self.repo.release(items)}

    async def _durably(self, operation: Callable[[], Awaitable[T]]) -> T:
        """Retry a transition through database outages: an attempt's outcome is never dropped.

        Every failure is retried: the fenced statements are idempotent, and a transition
        that can never succeed (the row was recovered elsewhere) returns None, not an error.
        """
        delay = 0.05
        while True:
            try:
                return await operation()
            except Exception:
                logger.warning("task transition failed; retrying", exc_info=True)
                await asyncio.sleep(delay)
                delay = min(delay * 2, TRANSITION_RETRY_MAX_S)

    # -- heartbeats ---------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        while self._running or self.slots:
            await asyncio.sleep(self.config.heartbeat_interval_s)
            await self.heartbeat_once()

    async def heartbeat_once(self) -> None:
        slots = list(self.slots.values())
        if not slots:
            return
        try:
            live = await self.repo.heartbeat([slot.key for slot in slots])
        except Exception:
            logger.warning("heartbeat failed", exc_info=True)
            return
        for slot in slots:
            status = live.get(slot.key[0])
            if status is None:
                if not slot.settled and self.slots.get(slot.key[0]) is slot:
                    logger.warning("attempt lost its claim; aborting", extra={"task_id": slot.attempt.task_id})
                    slot.abort.abort(AbortReason.LOST_CLAIM)
            elif status == Status.CANCELLING:
                slot.abort.abort(AbortReason.CANCELLED)
