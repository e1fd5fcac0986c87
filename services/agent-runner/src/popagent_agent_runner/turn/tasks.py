"""A background task attempt as one agent turn (served by `servicers/tasks.py`).

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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from popagent_agent_runner.context.events import TurnEvents, TurnOutput
from popagent_agent_runner.context.hooks import bounded
from popagent_agent_runner.failures import TurnFailure
from popagent_agent_runner.state.sessions import SessionStore
from popagent_agent_runner.turn.runner import TurnInput, TurnRunner
from popagent_agent_runner.turn.ui_message import UserMessage
from popagent_core.errors import AlreadyExists, InvalidArgument, NotFound

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
                message=UserMessage.of_text(f"task-{request.task_id}-{request.attempt}", request.prompt),
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
