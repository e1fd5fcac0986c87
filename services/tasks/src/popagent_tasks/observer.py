"""Lifecycle observers: `TaskStart` after a claim, `TaskStop` after the durable transition.

Observers are best effort. The runtime calls them only after the state they report is
committed and swallows (logs) whatever they raise, so no observer can delay a
transition into a different one or report a state the database does not hold.

The observers: `HooksObserver` (the `TaskStart`/`TaskStop` hooks) and `BrowserCloseObserver`
(a task's browser tab is closed once the task has ended). Anything else that must follow a
task's end (a channel posting its result) is one more `LifecycleObserver` in `Observers`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from popagent.browser_bridge.v1 import browser_bridge_pb2, browser_bridge_pb2_grpc
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
    # The session its turns run in (`Task.thread_id`: its own, or one made for the task).
    thread_id: str

    @classmethod
    def of(cls, task: Task) -> TaskLifecycle:
        """The lifecycle of the task's current attempt."""
        return cls(**task.attempt_fields(), kind=task.kind.value, source=task.source.value, thread_id=task.thread_id)

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


# A task has ended for good: no attempt follows these.
FINAL_STATUSES = frozenset({StopStatus.COMPLETED, StopStatus.DEAD_LETTER, StopStatus.CANCELLED})
CLOSE_TIMEOUT_S = 10.0


class BrowserCloseObserver:
    """Closes the browser tab (and its popups) of a task's session once the task has ended.

    Not after a failed attempt that will be retried (the next attempt may go on where it
    was), nor after an interruption (the attempt's turn may still be running).
    """

    def __init__(self, bridge: browser_bridge_pb2_grpc.BrowserBridgeServiceStub) -> None:
        self.bridge = bridge

    async def task_started(self, event: TaskStarted) -> None:
        return None

    async def task_stopped(self, event: TaskStopped) -> None:
        ended = event.status in FINAL_STATUSES or (event.status == StopStatus.FAILED and not event.will_retry)
        if not ended:
            return
        closed = await self.bridge.CloseSession(
            browser_bridge_pb2.CloseSessionRequest(session_id=event.task.thread_id), timeout=CLOSE_TIMEOUT_S
        )
        if closed.closed:
            logger.info("task's browser tab closed", extra={"task_id": event.task.task_id})


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
