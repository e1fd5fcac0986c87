"""Lifecycle observers: `TaskStart` after a claim, `TaskStop` after the durable transition.

Observers are best effort. The runtime calls them only after the state they report is
committed and swallows (logs) whatever they raise, so no observer can delay a
transition into a different one or report a state the database does not hold.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from popagent_hooks_client.client import HooksClient
from popagent_hooks_client.events import Event
from popagent_tasks.model import Task, truncate

logger = logging.getLogger(__name__)

# Handlers get enough of the prompt to recognize the task, never an unbounded payload.
PROMPT_DETAIL_CHARS = 4 * 1024


class StopStatus:
    """`TaskStop` statuses: the durable terminal states, an intermediate failed attempt
    (`failed` with `willRetry`), and `interrupted` when abort acknowledgement expired."""

    COMPLETED = "completed"
    FAILED = "failed"
    DEAD_LETTER = "dead-letter"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"


@dataclass(frozen=True)
class TaskLifecycle:
    """What both events of one attempt share."""

    task_id: str
    attempt: int
    max_attempts: int
    kind: str
    source: str
    workspace_id: str
    session_id: str
    model: str
    schedule_id: str
    parent_task_id: str
    turn_id: str
    trace_id: str

    @classmethod
    def of(cls, task: Task) -> TaskLifecycle:
        """The lifecycle of the task's current attempt."""
        return cls(**task.attempt_fields(), kind=task.kind.value, source=task.source.value)

    def detail(self) -> dict[str, Any]:
        return {
            "taskId": self.task_id,
            "attempt": self.attempt,
            "maxAttempts": self.max_attempts,
            "kind": self.kind,
            "source": self.source,
            "workspaceId": self.workspace_id,
            "scheduleId": self.schedule_id or None,
            "parentTaskId": self.parent_task_id or None,
            "traceId": self.trace_id,
        }


@dataclass(frozen=True)
class TaskStarted:
    task: TaskLifecycle
    prompt: str


@dataclass(frozen=True)
class TaskStopped:
    task: TaskLifecycle
    status: str
    outcome: str = ""
    error_class: str = ""
    error: str = ""
    will_retry: bool = False
    # Why an interruption happened (cancelled, timeout, shutdown); empty otherwise.
    abort_reason: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def detail(self) -> dict[str, Any]:
        detail = self.task.detail() | {"status": self.status, "willRetry": self.will_retry}
        if self.outcome:
            detail["outcome"] = self.outcome
        if self.error_class:
            detail["error"] = {"class": self.error_class, "message": self.error}
        if self.abort_reason:
            detail["abortReason"] = self.abort_reason
        return detail | self.extra


class LifecycleObserver(Protocol):
    async def task_started(self, event: TaskStarted) -> None: ...

    async def task_stopped(self, event: TaskStopped) -> None: ...


class HooksObserver:
    """Dispatches `TaskStart`/`TaskStop` through the hooks service (no RPC when no handler matches)."""

    def __init__(self, client: HooksClient) -> None:
        self.client = client

    async def task_started(self, event: TaskStarted) -> None:
        detail = event.task.detail() | {"prompt": truncate(event.prompt, PROMPT_DETAIL_CHARS)}
        await self.client.dispatch(
            Event.TASK_START,
            session_id=event.task.session_id,
            turn_id=event.task.turn_id,
            model=event.task.model,
            detail=detail,
        )

    async def task_stopped(self, event: TaskStopped) -> None:
        await self.client.dispatch(
            Event.TASK_STOP,
            session_id=event.task.session_id,
            turn_id=event.task.turn_id,
            model=event.task.model,
            detail=event.detail(),
        )


class Observers:
    """Fans one event out to every observer; each failure is logged and goes no further."""

    def __init__(self, observers: Sequence[LifecycleObserver]) -> None:
        self.observers = tuple(observers)

    async def task_started(self, event: TaskStarted) -> None:
        for observer in self.observers:
            try:
                await observer.task_started(event)
            except Exception:
                logger.warning(
                    "TaskStart observer failed",
                    exc_info=True,
                    extra={"task_id": event.task.task_id, "observer": type(observer).__name__},
                )

    async def task_stopped(self, event: TaskStopped) -> None:
        for observer in self.observers:
            try:
                await observer.task_stopped(event)
            except Exception:
                logger.warning(
                    "TaskStop observer failed",
                    exc_info=True,
                    extra={"task_id": event.task.task_id, "observer": type(observer).__name__},
                )
