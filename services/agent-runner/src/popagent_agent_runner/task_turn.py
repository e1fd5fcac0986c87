"""A background task attempt as one agent turn, and `AgentRunnerTaskService.RunTask`.

The attempt runs through the chat turn's own `TurnRunner` (same agents, delegation,
recall, step limits, `UserPromptSubmit`/tool/`Stop`/`StopFailure` hooks and final-response
guard) under the turn and trace ids the tasks service already used for `TaskStart`, and
without `SessionStart` (a task is not a chat session opening). What differs is only the
output: nothing streams to a UI; the final response text becomes the task's outcome and a
failure is sent as its `TurnFailure` (tasks maps it to a retry class).

A task without a session runs in a thread of its own, the one the tasks service names
(`thread_id`), created on the first attempt and reused by retries so a replay sees what
the failed attempt stored. Its row names the task, which keeps it out of the chat
session list; the task shows its thread id.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import grpc

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from popagent.agent_runner.v1 import agent_runner_pb2_grpc
from popagent_agent_runner.failures import TurnFailure
from popagent_agent_runner.state.sessions import SessionStore
from popagent_agent_runner.turn.events import TurnEvents, TurnOutput
from popagent_agent_runner.turn.hooks_points import bounded
from popagent_agent_runner.turn.runner import TurnInput, TurnRunner
from popagent_core.errors import AlreadyExists, InvalidArgument, NotFound, PopagentError

logger = logging.getLogger(__name__)

# The tasks service stores at most this much outcome (popagent_tasks.model.MAX_OUTCOME_CHARS).
MAX_OUTCOME_CHARS = 16 * 1024
MAX_ERROR_CHARS = 2 * 1024
MAX_PROGRESS_CHARS = 200
# Nobody reads a task turn's UI event stream; it is drained and dropped this often.
DRAIN_INTERVAL_S = 0.25
TASK_SESSION_TITLE_CHARS = 60


@dataclass(frozen=True)
class TaskResult:
    ok: bool
    outcome: str = ""
    failure: TurnFailure | None = None
    error_message: str = ""


async def _drain(events: TurnEvents) -> None:
    async for _ in events.batches():
        pass


class _TaskOutput(TurnOutput):
    """The turn's output, reporting coarse progress (nothing streams to a UI)."""

    def __init__(self, progress: Callable[[str], None]) -> None:
        super().__init__(TurnEvents(DRAIN_INTERVAL_S))
        self.progress = progress
        self.steps = 0

    def step_start(self) -> None:
        super().step_start()
        self.steps += 1
        self.progress(f"step {self.steps}")

    def tool_input(self, tool_call_id: str, tool_name: str, arguments: dict[str, Any]) -> None:
        super().tool_input(tool_call_id, tool_name, arguments)
        self.progress(bounded(f"tool {tool_name}", MAX_PROGRESS_CHARS))


class TaskTurns:
    """Runs task attempts over the chat turn's runner parts."""

    def __init__(self, runner: TurnRunner, sessions: SessionStore) -> None:
        self.runner = runner
        self.sessions = sessions

    async def run(self, request: pb.RunTaskRequest, progress: Callable[[str], None]) -> TaskResult:
        if not request.task_id or not request.prompt:
            raise InvalidArgument("task_id and prompt are required")
        try:
            session_id = await self._session(request)
            turn = TurnInput(
                session_id=session_id,
                message={
                    "id": f"task-{request.task_id}-{request.attempt}",
                    "role": "user",
                    "parts": [{"type": "text", "text": request.prompt}],
                },
                model=request.model,
                workspace_id=request.workspace_id,
                turn_id=request.turn_id or uuid.uuid4().hex,
                trace_id=request.trace_id or uuid.uuid4().hex,
                session_start=False,
                self_update=request.execution_source == "self-update",
            )
            prepared = await self.runner.prepare(turn)
        except (InvalidArgument, NotFound) as exc:
            return TaskResult(False, failure=TurnFailure.INVALID_TASK, error_message=bounded(str(exc), MAX_ERROR_CHARS))
        output = _TaskOutput(progress)
        deadline = request.deadline_s if request.deadline_s > 0 else None
        drain = asyncio.create_task(_drain(output.events), name=f"task-turn-drain-{request.task_id}")
        try:
            async with asyncio.timeout(deadline):
                end = await self.runner.run(prepared, output)
        except TimeoutError:
            return TaskResult(False, failure=TurnFailure.DEADLINE, error_message=f"the turn ran past {deadline:g} s")
        finally:
            output.events.close()
            drain.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await drain
        if end.outcome == "prompt_denied":
            # The chat turn answers a denied prompt with a refusal; for a task it is a failure.
            return TaskResult(
                False,
                failure=TurnFailure.HOOK_DENIED,
                error_message=bounded(f"UserPromptSubmit denied: {end.message}", MAX_ERROR_CHARS),
            )
        if end.outcome == "failed":
            return TaskResult(
                False,
                failure=end.error_class or TurnFailure.FRAMEWORK,
                error_message=bounded(end.message, MAX_ERROR_CHARS),
            )
        return TaskResult(True, outcome=bounded(output.text(), MAX_OUTCOME_CHARS))

    async def _session(self, request: pb.RunTaskRequest) -> str:
        if request.session_id:
            return request.session_id
        if not request.thread_id:
            raise InvalidArgument("a task without a session needs its thread_id")
        title = bounded(f"Task: {request.prompt.splitlines()[0]}", TASK_SESSION_TITLE_CHARS)
        with contextlib.suppress(AlreadyExists):
            await self.sessions.create(request.thread_id, title, request.workspace_id, task_id=request.task_id)
        return request.thread_id


SHUTDOWN_RESULT = pb.TaskTurnEvent(
    result=pb.TaskTurnResult(
        ok=False,
        failure_class=TurnFailure.SHUTDOWN.proto,
        error_message="agent-runner stopped while the turn ran; the task goes back to the queue",
    )
)


class TaskServicer(agent_runner_pb2_grpc.AgentRunnerTaskServiceServicer):
    def __init__(self, turns: TaskTurns) -> None:
        self.turns = turns
        # Each running call's turn and the queue its events go out through.
        self._running: dict[asyncio.Task[None], asyncio.Queue[pb.TaskTurnEvent]] = {}

    async def interrupt_all(self, grace_s: float) -> None:
        """Shutdown, before the server stops: turns that do not end within `grace_s` are
        cancelled and their calls answer `SHUTDOWN`, so the tasks worker requeues them
        (uncounted) instead of seeing a cancelled call."""
        if self._running:
            await asyncio.wait(set(self._running), timeout=grace_s)
        for task, events in list(self._running.items()):
            if not task.done():
                logger.info("task turn interrupted by shutdown", extra={"task": task.get_name()})
                events.put_nowait(SHUTDOWN_RESULT)
                task.cancel()

    async def RunTask(  # type: ignore[override]
        self, request: pb.RunTaskRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.TaskTurnEvent]:
        events: asyncio.Queue[pb.TaskTurnEvent] = asyncio.Queue()

        async def run() -> None:
            try:
                result = await self.turns.run(request, lambda text: events.put_nowait(pb.TaskTurnEvent(progress=text)))
            except PopagentError as exc:
                # Storage or configuration trouble outside the turn: the worker classifies it.
                logger.warning("task turn failed", extra={"task_id": request.task_id, "error": str(exc)})
                raise
            events.put_nowait(
                pb.TaskTurnEvent(
                    result=pb.TaskTurnResult(
                        ok=result.ok,
                        outcome=result.outcome,
                        failure_class=result.failure.proto if result.failure else pb.TURN_FAILURE_CLASS_UNSPECIFIED,
                        error_message=result.error_message,
                    )
                )
            )

        # The turn runs beside this call; when the caller cancels, gRPC cancels this call
        # and the `finally` cancels the turn with it.
        task = asyncio.create_task(run(), name=f"task-turn-{request.task_id}-{request.attempt}")
        self._running[task] = events
        try:
            while True:
                getter = asyncio.ensure_future(events.get())
                try:
                    await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    getter.cancel()
                if getter.done() and not getter.cancelled():
                    event = getter.result()
                elif not events.empty():
                    event = events.get_nowait()
                elif task.cancelled():
                    # Interrupted by shutdown after its SHUTDOWN result was taken: nothing more to say.
                    return
                else:
                    # The turn ended without a result: its error becomes this call's status.
                    await task
                    return
                yield event
                if event.HasField("result"):
                    return
        finally:
            self._running.pop(task, None)
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
