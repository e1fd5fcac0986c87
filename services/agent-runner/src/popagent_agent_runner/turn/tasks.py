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

The attempt is a turn record like a chat turn's (docs/turns.md): it runs when no other turn runs or
waits on its session (it waits for one, within its deadline), its lease is kept while it runs, and
every batch it streams goes to the turn log, so `GET /api/chat/{sessionId}/stream` follows it. The
tasks service keeps its own attempt fencing; a cancel goes through the task.

A tool call that asks for an approval (docs/approvals.md) waits as a chat turn's does. The attempt
reports the wait (`TaskApprovalWait`, and a progress line) and its deadline stops while it waits: a
person's answer takes as long as it takes, and the approval's own expiry
(`POPAGENT_APPROVAL_TIMEOUT_S`, a denial) bounds the wait instead. The tasks worker stops its own
deadline on the same events.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
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
from popagent_agent_runner.turn.log import TurnLog
from popagent_agent_runner.turn.records import CompletedTaskTurn, TurnRecords, TurnStatus
from popagent_agent_runner.turn.runner import TurnInput, TurnRunner
from popagent_agent_runner.turn.self_update import Prepared, SelfUpdate
from popagent_agent_runner.turn.ui_message import UserMessage
from popagent_agent_runner.workspace.self_update import SelfUpdateRefused
from popagent_core.errors import AlreadyExists, InvalidArgument, NotFound, PopagentError

logger = logging.getLogger(__name__)

# The tasks service stores at most this much outcome (popagent_tasks.model.MAX_OUTCOME_CHARS).
MAX_OUTCOME_CHARS = 16 * 1024
MAX_ERROR_CHARS = 2 * 1024
MAX_PROGRESS_CHARS = 200
# A task turn's events go to the turn log (for followers) in batches at most this often.
DRAIN_INTERVAL_S = 0.25
# How often an attempt whose session has a turn running (or queued) asks again.
SESSION_POLL_S = 0.25
TASK_SESSION_TITLE_CHARS = 60


@dataclass(frozen=True)
class TaskResult:
    ok: bool
    outcome: str = ""
    failure: TurnFailure | None = None
    error_message: str = ""


class _Deadline:
    """The attempt's `asyncio.timeout`, stopped while the turn waits for a person: the time spent
    waiting is added back when the last wait ends. No deadline (None) stays none."""

    def __init__(self) -> None:
        self._timeout: asyncio.Timeout | None = None
        self._waits = 0
        self._left: float | None = None

    def bind(self, timeout: asyncio.Timeout) -> None:
        self._timeout = timeout

    def pause(self) -> None:
        self._waits += 1
        timeout = self._timeout
        if self._waits != 1 or timeout is None or timeout.expired():
            return
        when = timeout.when()
        if when is None:
            return
        loop = asyncio.get_running_loop()
        self._left = max(when - loop.time(), 0.0)
        timeout.reschedule(None)

    def resume(self) -> None:
        self._waits = max(self._waits - 1, 0)
        timeout, left = self._timeout, self._left
        if self._waits or timeout is None or left is None or timeout.expired():
            return
        self._left = None
        timeout.reschedule(asyncio.get_running_loop().time() + left)


class _TaskOutput(TurnOutput):
    """The turn's output, reporting coarse progress and its approval waits (nothing streams to a UI)."""

    def __init__(
        self, progress: Callable[[str], None], approval_wait: Callable[[pb.TaskApprovalWait], None], deadline: _Deadline
    ) -> None:
        super().__init__(TurnEvents(DRAIN_INTERVAL_S))
        self.progress = progress
        self.approval_wait = approval_wait
        self.deadline = deadline
        self.steps = 0
        # The tool of each approval this turn waits for, by approval id.
        self._waiting_tools: dict[str, str] = {}

    def step_start(self) -> None:
        super().step_start()
        self.steps += 1
        self.progress(f"step {self.steps}")

    def tool_input(self, tool_call_id: str, tool_name: str, arguments: dict[str, Any]) -> None:
        if tool_call_id not in self._tools:
            self.progress(bounded(f"tool {tool_name}", MAX_PROGRESS_CHARS))
        super().tool_input(tool_call_id, tool_name, arguments)

    def tool_approval_request(
        self, tool_call_id: str, tool_name: str, arguments: dict[str, Any], approval_id: str, reason: str
    ) -> None:
        super().tool_approval_request(tool_call_id, tool_name, arguments, approval_id, reason)
        if approval_id in self._waiting_tools:
            return
        self._waiting_tools[approval_id] = tool_name
        self.deadline.pause()
        self.progress(bounded(f"waiting for approval: {tool_name}", MAX_PROGRESS_CHARS))
        self.approval_wait(
            pb.TaskApprovalWait(
                waiting=True,
                approval_id=approval_id,
                tool_name=tool_name,
                reason=bounded(reason, MAX_ERROR_CHARS),
            )
        )

    def tool_approved(self, tool_call_id: str, approval_id: str) -> None:
        super().tool_approved(tool_call_id, approval_id)
        self._wait_ended(approval_id, "approved")

    def tool_denied(
        self, tool_call_id: str, tool_name: str, arguments: dict[str, Any], approval_id: str, reason: str
    ) -> None:
        super().tool_denied(tool_call_id, tool_name, arguments, approval_id, reason)
        self._wait_ended(approval_id, "denied")

    def _wait_ended(self, approval_id: str, answer: str) -> None:
        # A call whose approval was answered before this turn asked about it (a taken-over turn) never waited.
        tool_name = self._waiting_tools.pop(approval_id, None)
        if tool_name is None:
            return
        self.deadline.resume()
        self.progress(bounded(f"{answer}: {tool_name}", MAX_PROGRESS_CHARS))
        self.approval_wait(pb.TaskApprovalWait(waiting=False, approval_id=approval_id, tool_name=tool_name))


def _refused(message: str) -> TaskResult:
    return TaskResult(False, failure=TurnFailure.CONTAINMENT, error_message=bounded(message, MAX_ERROR_CHARS))


class TaskTurns:
    """Runs task attempts over the chat turn's runner parts."""

    def __init__(
        self,
        runner: TurnRunner,
        sessions: SessionStore,
        records: TurnRecords,
        log: TurnLog,
        self_update: SelfUpdate | None = None,
    ) -> None:
        self.runner = runner
        # Contained self-update (turn/self_update.py); None: self-update tasks are refused.
        self.self_update = self_update
        self.sessions = sessions
        self.records = records
        self.log = log
        # The attempts' turns running here, whose leases this runner keeps.
        self._running: set[str] = set()

    def running_turn_ids(self) -> list[str]:
        return list(self._running)

    async def run(
        self,
        request: pb.RunTaskRequest,
        progress: Callable[[str], None],
        approval_wait: Callable[[pb.TaskApprovalWait], None],
    ) -> TaskResult:
        if not request.task_id or not request.prompt:
            raise InvalidArgument("task_id and prompt are required")
        if request.execution_source != "self-update":
            return await self._run(request, progress, approval_wait, None)
        if self.self_update is None:
            return _refused("this agent-runner runs no contained self-update")
        try:
            contained = await self.self_update.prepare(request.workspace_id, request.task_id, request.attempt)
        except SelfUpdateRefused as exc:
            return _refused(str(exc))
        progress(bounded(f"prepared {contained.branch} from {contained.captured.head[:12]}", MAX_PROGRESS_CHARS))
        result = TaskResult(False, failure=TurnFailure.FRAMEWORK, error_message="the self-update turn did not end")
        try:
            async with contained.stages.stage("turn"):
                result = await self._run(request, progress, approval_wait, contained)
        finally:
            # However the turn ended (a cancel included): verify or discard, and remove the clone.
            concluded = await asyncio.shield(
                asyncio.ensure_future(self.self_update.conclude(contained, result.ok, progress))
            )
        if not result.ok:
            return result
        if not concluded.ok:
            return _refused(concluded.message)
        return TaskResult(True, outcome=bounded(f"{concluded.message}\n\n{result.outcome}", MAX_OUTCOME_CHARS))

    async def _run(
        self,
        request: pb.RunTaskRequest,
        progress: Callable[[str], None],
        approval_wait: Callable[[pb.TaskApprovalWait], None],
        contained: Prepared | None,
    ) -> TaskResult:
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
                containment=contained.containment if contained is not None else None,
            )
            prepared = await self.runner.prepare(turn)
            if contained is not None and self.self_update is not None:
                prepared = dataclasses.replace(prepared, state=self.self_update.contain(contained, prepared.state))
        except (InvalidArgument, NotFound) as exc:
            return TaskResult(False, failure=TurnFailure.INVALID_TASK, error_message=bounded(str(exc), MAX_ERROR_CHARS))
        paused = _Deadline()
        output = _TaskOutput(progress, approval_wait, paused)
        deadline = request.deadline_s if request.deadline_s > 0 else None
        status: TurnStatus = "interrupted"
        started = False
        drain = asyncio.create_task(self._log(turn.turn_id, output.events), name=f"task-turn-log-{request.task_id}")
        try:
            async with asyncio.timeout(deadline) as timeout:
                paused.bind(timeout)
                earlier = await self._take_session(turn, request.task_id, adopt=contained is None)
                if earlier is not None:
                    progress(
                        bounded(
                            f"the turn of an earlier attempt ({earlier.turn_id}) had completed: its answer is "
                            "this attempt's outcome, and nothing ran again",
                            MAX_PROGRESS_CHARS,
                        )
                    )
                    return TaskResult(True, outcome=bounded(earlier.outcome, MAX_OUTCOME_CHARS))
                started = True
                self._running.add(turn.turn_id)
                end = await self.runner.run(prepared, output)
            status = "completed" if end.outcome == "answered" else "failed"
        except TimeoutError:
            status = "failed"
            return TaskResult(False, failure=TurnFailure.DEADLINE, error_message=f"the turn ran past {deadline:g} s")
        finally:
            output.events.close()
            with contextlib.suppress(asyncio.CancelledError):
                await drain
            self._running.discard(turn.turn_id)
            if started:
                answer = bounded(output.text(), MAX_OUTCOME_CHARS) if status == "completed" else None
                await self._conclude(turn.turn_id, status, answer)
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

    async def _take_session(self, turn: TurnInput, task_id: str, *, adopt: bool) -> CompletedTaskTurn | None:
        """Record the attempt as the session's running turn, once no other runs or waits there; None.

        With `adopt`, an earlier attempt's turn that completed instead (its tasks worker was lost
        after the turn ended and before the task's transition): its answer is this attempt's, and
        the work is not done twice. Contained self-update attempts never adopt: each verifies and
        imports its own clone's commit, which a completed turn alone does not say happened."""
        while True:
            if await self.records.start_task(turn.turn_id, turn.session_id, task_id, after_completed=adopt):
                return None
            if adopt and (earlier := await self.records.completed_task(task_id)) is not None:
                return earlier
            await asyncio.sleep(SESSION_POLL_S)

    async def _log(self, turn_id: str, events: TurnEvents) -> None:
        async for batch in events.batches():
            await self.log.append(turn_id, batch)

    async def _conclude(self, turn_id: str, status: TurnStatus, answer: str | None) -> None:
        """The record's final status (the session is free), then the log's end marker; shielded, so an
        attempt cancelled by its caller or a shutdown still records how it ended."""

        async def conclude() -> None:
            # The log holds the whole attempt before the record says it ended (followers stop then).
            await self.log.settle(turn_id)
            try:
                await self.records.finish(turn_id, status, task_outcome=answer)
            except PopagentError as exc:
                logger.warning("task turn status not stored", extra={"turn_id": turn_id, "error": str(exc)})
            await self.log.end(turn_id, status)

        await asyncio.shield(asyncio.ensure_future(conclude()))

    async def _session(self, request: pb.RunTaskRequest) -> str:
        if request.session_id:
            return request.session_id
        if not request.thread_id:
            raise InvalidArgument("a task without a session needs its thread_id")
        title = bounded(f"Task: {request.prompt.splitlines()[0]}", TASK_SESSION_TITLE_CHARS)
        with contextlib.suppress(AlreadyExists):
            await self.sessions.create(request.thread_id, title, request.workspace_id, task_id=request.task_id)
        return request.thread_id
