"""What runs one attempt of a task: the executor protocol, its abort signal and its failures.

The real executor is a thin gRPC call into agent-runner's task turn; tests plug in
executors of their own. An executor either returns the attempt's outcome (a short
text) or raises `TaskFailure` naming a failure class. Anything else it raises is an
`unknown` failure, which never retries.

Abort is cooperative: the runtime sets the signal (on cancellation, timeout, shutdown
or a lost claim) and waits a bounded interval for the executor to settle. It never
cancels the executor's coroutine, because only the executor knows how to stop its own
side effects; an executor that ignores the signal keeps its slot until it settles.
"""

from __future__ import annotations

import asyncio
import enum
import importlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from popagent_core.errors import (
    ConfigurationError,
    DeadlineExceeded,
    InvalidArgument,
    PermissionDenied,
    PopagentError,
    ResourceExhausted,
    StorageError,
    Unavailable,
)
from popagent_tasks.model import ErrorClass, Kind, Source, Task


class AbortReason(enum.StrEnum):
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"
    SHUTDOWN = "shutdown"
    LOST_CLAIM = "lost_claim"


class AbortSignal:
    """Set once, with the reason of the first abort."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self.reason: AbortReason | None = None

    @property
    def aborted(self) -> bool:
        return self._event.is_set()

    def abort(self, reason: AbortReason) -> None:
        if not self._event.is_set():
            self.reason = reason
            self._event.set()

    async def wait(self) -> AbortReason:
        await self._event.wait()
        assert self.reason is not None
        return self.reason


@dataclass(frozen=True)
class ApprovalWaitReport:
    """The attempt's turn started (`waiting`) or stopped waiting for a person to answer an approval."""

    waiting: bool
    approval_id: str
    tool_name: str


@dataclass(frozen=True)
class Attempt:
    """One claimed attempt: what to run, and the correlation ids of its lifecycle events."""

    task_id: str
    attempt: int
    max_attempts: int
    kind: Kind
    source: Source
    workspace_id: str
    prompt: str
    model: str
    session_id: str
    schedule_id: str
    parent_task_id: str
    turn_id: str
    trace_id: str
    # The thread the attempt's turn runs in (`Task.thread_id`).
    thread_id: str
    # Durable progress for this attempt; a no-op once the attempt no longer owns the task.
    report_progress: Callable[[str], Awaitable[None]]
    # The attempt waits for a person, or stopped waiting: its deadline stops meanwhile, and the
    # task shows the wait; a no-op once the attempt no longer owns the task.
    report_approval_wait: Callable[[ApprovalWaitReport], Awaitable[None]]

    @classmethod
    def of(
        cls,
        task: Task,
        report_progress: Callable[[str], Awaitable[None]],
        report_approval_wait: Callable[[ApprovalWaitReport], Awaitable[None]],
    ) -> Attempt:
        """The claimed task's current attempt."""
        return cls(
            **task.attempt_fields(),
            kind=task.kind,
            source=task.source,
            prompt=task.prompt,
            thread_id=task.thread_id,
            report_progress=report_progress,
            report_approval_wait=report_approval_wait,
        )


@runtime_checkable
class Executor(Protocol):
    async def execute(self, attempt: Attempt, abort: AbortSignal) -> str:
        """Run the attempt and return its outcome, or raise `TaskFailure`."""
        ...


class TaskFailure(Exception):
    """An attempt failed for a known reason."""

    def __init__(self, error_class: ErrorClass, message: str = "") -> None:
        super().__init__(message or error_class.value)
        self.error_class = error_class


# The error tree's classes, as they arrive from a gRPC executor through map_rpc_errors.
_CLASS_BY_ERROR: tuple[tuple[type[PopagentError], ErrorClass], ...] = (
    (StorageError, ErrorClass.DATABASE),
    (ConfigurationError, ErrorClass.CONFIGURATION),
    (DeadlineExceeded, ErrorClass.TIMEOUT),
    (ResourceExhausted, ErrorClass.RATE_LIMIT),
    (Unavailable, ErrorClass.INFRASTRUCTURE),
    (PermissionDenied, ErrorClass.PERMISSION),
    (InvalidArgument, ErrorClass.VALIDATION),
)


def classify(error: BaseException) -> ErrorClass:
    """The failure class of whatever an executor raised; unknown unless it says otherwise."""
    if isinstance(error, TaskFailure):
        return error.error_class
    for error_type, error_class in _CLASS_BY_ERROR:
        if isinstance(error, error_type):
            return error_class
    if isinstance(error, TimeoutError):
        return ErrorClass.TIMEOUT
    return ErrorClass.UNKNOWN


ExecutorFactory = Callable[[Any], Executor]


def load_executor(spec: str, settings: Any) -> Executor:
    """`package.module:attribute` names an executor factory; it is called with the settings."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ConfigurationError("POPAGENT_TASKS_EXECUTOR must be 'module:attribute'")
    try:
        factory = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(f"POPAGENT_TASKS_EXECUTOR {spec!r} cannot be loaded: {exc}") from exc
    executor = factory(settings)
    if not isinstance(executor, Executor):
        raise ConfigurationError(f"POPAGENT_TASKS_EXECUTOR {spec!r} did not produce an executor")
    return executor
