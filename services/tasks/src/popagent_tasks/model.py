"""Task states, failure classes and the retry policy (docs/architecture.md, A task attempt)."""

from __future__ import annotations

import enum
import random
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import TypedDict


class Status(enum.StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    CANCELLING = "cancelling"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    DEAD_LETTER = "dead-letter"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL

    @property
    def live(self) -> bool:
        """Claimed by a worker whose executor may still be running."""
        return self in (Status.RUNNING, Status.CANCELLING)


TERMINAL = frozenset({Status.COMPLETED, Status.FAILED, Status.CANCELLED, Status.DEAD_LETTER})


class Source(enum.StrEnum):
    USER = "user"
    SELF_UPDATE = "self-update"


class Kind(enum.StrEnum):
    TASK = "task"
    REMEDIATION = "remediation"


class ErrorClass(enum.StrEnum):
    """Why an attempt failed. The first six are transient; the rest never retry.

    `RELEASED` classes are not failures of the task at all: the attempt is released to the
    queue instead (`SHUTDOWN` without using up an attempt).
    """

    TIMEOUT = "timeout"
    PROVIDER = "provider"
    RATE_LIMIT = "rate_limit"
    BROWSER = "browser"
    DATABASE = "database"
    INFRASTRUCTURE = "infrastructure"
    HOOK_DENIED = "hook_denied"
    ABORTED = "aborted"
    VALIDATION = "validation"
    PERMISSION = "permission"
    CONTAINMENT = "containment"
    CONFIGURATION = "configuration"
    UNKNOWN = "unknown"
    # agent-runner stopped the turn because it was shutting down.
    SHUTDOWN = "shutdown"
    # The service running the turn cancelled it or went away mid-turn.
    INTERRUPTED = "interrupted"


TRANSIENT = frozenset(
    {
        ErrorClass.TIMEOUT,
        ErrorClass.PROVIDER,
        ErrorClass.RATE_LIMIT,
        ErrorClass.BROWSER,
        ErrorClass.DATABASE,
        ErrorClass.INFRASTRUCTURE,
    }
)

# Orderly events, not execution errors: the worker's or agent-runner's shutdown, the
# service cancelling the call or vanishing, a database unreachable when the result was
# saved, any other infrastructure outage. The attempt is released and requeued (fenced),
# for user tasks too; only `SHUTDOWN` does not count against max_attempts.
RELEASED = frozenset({ErrorClass.SHUTDOWN, ErrorClass.INTERRUPTED, ErrorClass.DATABASE, ErrorClass.INFRASTRUCTURE})

DEFAULT_MAX_ATTEMPTS = 3
MAX_ATTEMPTS_LIMIT = 20
# Bounds of what the API stores; the gateway enforces its own, smaller, ones too.
MAX_PROMPT_CHARS = 64 * 1024
MAX_EVIDENCE_CHARS = 4 * 1024
MAX_ERROR_CHARS = 2 * 1024
MAX_OUTCOME_CHARS = 16 * 1024
# Ids and names (a model, a session, an approval, a tool).
MAX_REF_CHARS = 200


def retry_eligible(source: Source, error_class: ErrorClass) -> bool:
    """Only contained self-update work replays, and only after a transient failure.

    Every self-update attempt starts from a fresh clone and only a verified commit can
    escape it, so a replay cannot duplicate side effects. A user task's side effects are
    unknown, so it fails after any execution error.
    """
    return source is Source.SELF_UPDATE and error_class in TRANSIENT


@dataclass(frozen=True)
class Backoff:
    """Capped exponential backoff with jitter: the delay after attempt n lies in
    [ceiling/2, ceiling], ceiling = min(cap, base * 2**(n-1)).

    The half-ceiling floor keeps a retry from being claimed before the failed attempt's
    TaskStop has been delivered, so observers see stop-then-start.
    """

    base_s: float
    cap_s: float

    def ceiling(self, attempt: int) -> float:
        return min(self.cap_s, self.base_s * 2 ** max(attempt - 1, 0))

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        ceiling = self.ceiling(attempt)
        return (rng or random).uniform(ceiling / 2, ceiling)


@dataclass(frozen=True, slots=True)
class ApprovalWait:
    """A running attempt's turn waiting for a person to answer a tool call's approval (docs/approvals.md)."""

    approval_id: str
    tool_name: str
    since: datetime


class AttemptFields(TypedDict):
    """What names the current attempt of a task wherever it goes (executors, lifecycle events): its
    ids as text (empty for none), its counts, and where it runs."""

    task_id: str
    attempt: int
    max_attempts: int
    workspace_id: str
    model: str
    session_id: str
    schedule_id: str
    parent_task_id: str
    turn_id: str
    trace_id: str


@dataclass(frozen=True, slots=True)
class TaskChannel:
    """A channel connection's conversation (and thread) a task's result is posted to."""

    connection_id: str
    conversation: str
    thread: str


@dataclass(frozen=True, slots=True)
class Task:
    """One row of `popagent_agent_tasks`, as every repository read and transition returns it."""

    id: uuid.UUID
    kind: Kind
    status: Status
    source: Source
    workspace_id: str
    prompt: str
    model: str
    session_id: str
    schedule_id: uuid.UUID | None
    tick: datetime | None
    parent_task_id: uuid.UUID | None
    # The fencing token of the current (or last) attempt.
    attempt_count: int
    max_attempts: int
    next_attempt_at: datetime | None
    claimed_by: str | None
    turn_id: uuid.UUID | None
    trace_id: str | None
    started_at: datetime | None
    heartbeat_at: datetime | None
    finished_at: datetime | None
    last_error_class: str | None
    last_error: str | None
    dead_lettered_at: datetime | None
    outcome: str | None
    resolution: str | None
    resolved_at: datetime | None
    cancel_requested_at: datetime | None
    created_at: datetime
    updated_at: datetime
    # The approval the running attempt's turn waits for (all three set, or none).
    approval_wait_id: str | None
    approval_wait_tool: str | None
    approval_wait_since: datetime | None

    @property
    def approval_wait(self) -> ApprovalWait | None:
        if self.approval_wait_id is None or self.approval_wait_tool is None or self.approval_wait_since is None:
            return None
        return ApprovalWait(self.approval_wait_id, self.approval_wait_tool, self.approval_wait_since)

    @property
    def attempt_key(self) -> tuple[uuid.UUID, int]:
        """(id, attempt): what every fenced transition of the current attempt names."""
        return self.id, self.attempt_count

    def attempt_fields(self) -> AttemptFields:
        return AttemptFields(
            task_id=str(self.id),
            attempt=self.attempt_count,
            max_attempts=self.max_attempts,
            workspace_id=self.workspace_id,
            model=self.model,
            session_id=self.session_id,
            schedule_id=str(self.schedule_id or ""),
            parent_task_id=str(self.parent_task_id or ""),
            turn_id=str(self.turn_id or ""),
            trace_id=self.trace_id or "",
        )

    @property
    def thread_id(self) -> str:
        """The thread its turns run in: its session's, or, without one, a thread of its own
        (never listed as a chat session)."""
        return self.session_id or f"task-{self.id}"


@dataclass(frozen=True, slots=True)
class Schedule:
    """One row of `popagent_agent_schedules`."""

    id: uuid.UUID
    source: Source
    workspace_id: str
    name: str
    prompt: str
    model: str
    session_id: str
    cron: str
    # NULL only before the one-time backfill (popagent_tasks.schedules.backfill_schedules).
    timezone: str | None
    next_run_at: datetime | None
    enabled: bool
    max_attempts: int
    last_tick: datetime | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class ScheduleFields:
    """What a schedule write sets: a new user schedule's values, or an edited one's."""

    name: str
    prompt: str
    model: str
    session_id: str
    cron: str
    timezone: str | None
    next_run_at: datetime | None
    enabled: bool
    max_attempts: int


@dataclass(frozen=True)
class SelfUpdateSlot:
    """The one system schedule a workspace should have while self-update may run there."""

    workspace_id: str
    name: str
    prompt: str
    cron: str
    # The first run after now, for a new row or a changed cron (an unchanged row keeps its own).
    next_run_at: datetime | None
    max_attempts: int


def truncate(text: str, limit: int) -> str:
    """At most `limit` characters, marking the cut."""
    if len(text) <= limit:
        return text
    return text[: max(limit - 1, 0)] + "…"
