"""Lifecycle observers: `TaskStart` after a claim, `TaskStop` after the durable transition.

Observers are best effort. The runtime calls them only after the state they report is
committed and swallows (logs) whatever they raise, so no observer can delay a
transition into a different one or report a state the database does not hold.

The observers: `HooksObserver` (the `TaskStart`/`TaskStop` hooks), `BrowserCloseObserver`
(a task's browser tabs are closed once the task has ended) and `ChannelResultObserver` (a task's
result is posted to the channel connection it names). Each is a class with an `open`
that returns it, or None when its setting turns it off; `OBSERVERS` lists them in the order
they run. Anything else that must follow a task's end is one more such class in that list.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, Self

import asyncpg

from popagent.agent_runner.v1 import channels_pb2, channels_pb2_grpc
from popagent.browser_bridge.v1 import browser_bridge_pb2, browser_bridge_pb2_grpc
from popagent.hooks.v1 import hooks_pb2_grpc
from popagent_core.db import open_pool
from popagent_core.errors import PopagentError
from popagent_core.grpc_client import map_rpc_errors, open_channel
from popagent_core.service import schema_for
from popagent_hooks_client.client import HooksClient
from popagent_hooks_client.events import Event
from popagent_tasks.model import Task, truncate
from popagent_tasks.repo import QUERIES
from popagent_tasks.settings import Settings

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


@dataclass(frozen=True)
class TaskWaiting:
    """The attempt's turn started waiting for a person to answer a tool call's approval."""

    task: TaskLifecycle
    approval_id: str
    tool_name: str


class LifecycleObserver(Protocol):
    async def task_started(self, event: TaskStarted) -> None: ...

    async def task_stopped(self, event: TaskStopped) -> None: ...


class ObserverKind(Protocol):
    """An observer class as the service builds it: `open` connects what it needs (channels
    entered on `stack`, closed with the service) and returns the observer, or None when its
    setting turns it off."""

    @classmethod
    async def open(cls, settings: Settings, stack: contextlib.AsyncExitStack) -> LifecycleObserver | None: ...


class HooksObserver:
    """Dispatches `TaskStart`/`TaskStop` through the hooks service (no RPC when no handler matches)."""

    def __init__(self, client: HooksClient) -> None:
        self.client = client

    @classmethod
    async def open(cls, settings: Settings, stack: contextlib.AsyncExitStack) -> Self | None:
        if not settings.hooks_enabled:
            return None
        channel = await stack.enter_async_context(open_channel(settings.hooks_address, settings.internal_token))
        return cls(HooksClient(hooks_pb2_grpc.HooksServiceStub(channel)))

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
    """Closes every browser tab (popups included) of a task's session once the task has ended.

    browser-bridge owns each tab by the chat session whose turn opened it; a task's turns (and
    the specialists they delegate to) browse as the task's thread (`Task.thread_id`), so closing
    that session closes the task's tabs. Not after a failed attempt that will be retried (the
    next attempt may go on where it was), nor after an interruption (the attempt's turn may
    still be running). Not for a task that ran on a chat session: its tabs are that chat's, which
    the user may be looking at or have taken over, and they close with the chat session.
    """

    def __init__(self, bridge: browser_bridge_pb2_grpc.BrowserBridgeServiceStub) -> None:
        self.bridge = bridge

    @classmethod
    async def open(cls, settings: Settings, stack: contextlib.AsyncExitStack) -> Self | None:
        if not settings.browser_close_enabled:
            return None
        channel = await stack.enter_async_context(
            open_channel(settings.browser_bridge_address, settings.internal_token)
        )
        return cls(browser_bridge_pb2_grpc.BrowserBridgeServiceStub(channel))

    async def task_started(self, event: TaskStarted) -> None:
        return None

    async def task_stopped(self, event: TaskStopped) -> None:
        ended = event.status in FINAL_STATUSES or (event.status == StopStatus.FAILED and not event.will_retry)
        if not ended or event.task.session_id:
            return
        closed = await self.bridge.CloseSession(
            browser_bridge_pb2.CloseSessionRequest(session_id=event.task.thread_id), timeout=CLOSE_TIMEOUT_S
        )
        if closed.closed:
            logger.info("task's browser tab closed", extra={"task_id": event.task.task_id})


POST_TIMEOUT_S = 30.0
# The result as posted: the platform splits a longer one into several messages, so only this bounds it.
MAX_POSTED_RESULT_CHARS = 16 * 1024


def result_text(event: TaskStopped) -> str:
    task = f"Task `{event.task.task_id}`"
    if event.status == StopStatus.COMPLETED:
        return f"{task} completed.\n\n{truncate(event.outcome, MAX_POSTED_RESULT_CHARS) or '(no answer)'}"
    if event.status == StopStatus.CANCELLED:
        return f"{task} was cancelled."
    return f"{task} failed ({event.error_class or event.status}): {truncate(event.error, 2000) or 'no details'}"


class ChannelResultObserver:
    """Posts a task's result to the channel connection's conversation it names (`popagent_task_channels`)
    once the task has ended for good: completed, failed with no retry left, dead-lettered or cancelled.
    agent-runner posts it (`AgentRunnerChannelsService.PostToChannel`: the bot token stays there); a post
    that fails is logged by `Observers` and changes nothing about the task."""

    def __init__(self, pool: asyncpg.Pool, channels: channels_pb2_grpc.AgentRunnerChannelsServiceStub) -> None:
        self.pool = pool
        self.channels = channels

    @classmethod
    async def open(cls, settings: Settings, stack: contextlib.AsyncExitStack) -> Self | None:
        if not settings.agent_runner_address:
            return None
        pool = await stack.enter_async_context(
            open_pool(
                settings.database_url,
                schema_for("tasks"),
                min_size=1,
                max_size=2,
                application_name="popagent-tasks-channels",
            )
        )
        channel = await stack.enter_async_context(open_channel(settings.agent_runner_address, settings.internal_token))
        return cls(pool, channels_pb2_grpc.AgentRunnerChannelsServiceStub(channel))

    async def task_started(self, event: TaskStarted) -> None:
        return None

    async def task_waiting(self, event: TaskWaiting) -> None:
        """A needs-you notice: the approval's card, with its buttons, in the task's channel."""
        target = await self.pool.fetchrow(QUERIES["task_channel"], uuid.UUID(event.task.task_id))
        if target is None:
            return
        try:
            with map_rpc_errors():
                await self.channels.PostApprovalCard(
                    channels_pb2.PostApprovalCardRequest(
                        id=target["connection_id"],
                        conversation=target["conversation"],
                        thread=target["thread"],
                        approval_id=event.approval_id,
                    ),
                    timeout=POST_TIMEOUT_S,
                )
        except PopagentError as exc:
            logger.warning(
                "approval card not posted to the task's channel",
                extra={"task_id": event.task.task_id, "connection": target["connection_id"], "error": str(exc)},
            )

    async def task_stopped(self, event: TaskStopped) -> None:
        ended = event.status in FINAL_STATUSES or (event.status == StopStatus.FAILED and not event.will_retry)
        if not ended:
            return
        target = await self.pool.fetchrow(QUERIES["task_channel"], uuid.UUID(event.task.task_id))
        if target is None:
            return
        try:
            with map_rpc_errors():
                await self.channels.PostToChannel(
                    channels_pb2.PostToChannelRequest(
                        id=target["connection_id"],
                        conversation=target["conversation"],
                        thread=target["thread"],
                        text=result_text(event),
                    ),
                    timeout=POST_TIMEOUT_S,
                )
        except PopagentError as exc:
            # Expected (a connection deleted or disabled since, the platform down): one line, no trace.
            logger.warning(
                "task result not posted to its channel",
                extra={"task_id": event.task.task_id, "connection": target["connection_id"], "error": str(exc)},
            )
            return
        logger.info("task result posted to its channel", extra={"task_id": event.task.task_id})


# Every observer the service runs, in this order, each after the transition it reports is committed.
OBSERVERS: tuple[type[ObserverKind], ...] = (HooksObserver, BrowserCloseObserver, ChannelResultObserver)


async def open_observers(settings: Settings, stack: contextlib.AsyncExitStack) -> list[LifecycleObserver]:
    """The observers `settings` turns on, connected for as long as `stack` is open."""
    opened = [await kind.open(settings, stack) for kind in OBSERVERS]
    return [observer for observer in opened if observer is not None]


class Observers:
    """Fans one event out to every observer; each failure is logged and goes no further.

    Nothing an observer does or raises reaches the task: the transition is committed before
    they run, and the worker writes nothing after them."""

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

    async def task_waiting(self, event: TaskWaiting) -> None:
        """Only to the observers that take approval waits (a `task_waiting` method of their own)."""
        for observer in self.observers:
            notify = getattr(observer, "task_waiting", None)
            if notify is None:
                continue
            try:
                await notify(event)
            except Exception:
                logger.warning(
                    "approval wait observer failed",
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
