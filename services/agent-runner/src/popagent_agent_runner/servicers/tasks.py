"""`AgentRunnerTaskService.RunTask`: a task attempt's turn (`turn/tasks.py`) streamed back as events: its
progress, its approval waits and its result."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import grpc

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from popagent.agent_runner.v1 import agent_runner_pb2_grpc
from popagent_agent_runner.failures import TurnFailure
from popagent_agent_runner.state.self_update import MAX_LISTED, SelfUpdateAttempt
from popagent_agent_runner.turn.self_update import SelfUpdate
from popagent_agent_runner.turn.tasks import TaskTurns
from popagent_core.errors import FailedPrecondition, PopagentError

logger = logging.getLogger(__name__)

SHUTDOWN_RESULT = pb.TaskTurnEvent(
    result=pb.TaskTurnResult(
        ok=False,
        failure_class=TurnFailure.SHUTDOWN.proto,
        error_message="agent-runner stopped while the turn ran; the task goes back to the queue",
    )
)


def _attempt_message(attempt: SelfUpdateAttempt) -> pb.SelfUpdateAttempt:
    return pb.SelfUpdateAttempt(
        id=attempt.id,
        task_id=attempt.task_id,
        attempt=attempt.attempt,
        workspace_id=attempt.workspace_id,
        status=attempt.status,
        base_commit=attempt.base_commit,
        base_branch=attempt.base_branch,
        branch=attempt.branch,
        delegations=[pb.SelfUpdateDelegation(agent_id=agent, status=status) for agent, status in attempt.delegations],
        changed_paths=list(attempt.changed_paths),
        diff_stat=attempt.diff_stat,
        verification=attempt.verification,
        commit=attempt.commit or "",
        ref=attempt.ref or "",
        stages=[pb.SelfUpdateStage(stage=stage, ms=ms) for stage, ms in attempt.stages],
        created_at=attempt.created_at.isoformat(),
        finished_at=attempt.finished_at.isoformat() if attempt.finished_at else "",
    )


class TaskServicer(agent_runner_pb2_grpc.AgentRunnerTaskServiceServicer):
    def __init__(self, turns: TaskTurns) -> None:
        self.turns = turns
        # Each running call's turn and the queue its events go out through.
        self._running: dict[asyncio.Task[None], asyncio.Queue[pb.TaskTurnEvent]] = {}

    async def GetSelfUpdateEligibility(  # type: ignore[override]
        self, request: pb.GetSelfUpdateEligibilityRequest, context: grpc.aio.ServicerContext
    ) -> pb.SelfUpdateEligibility:
        if self.turns.self_update is None:
            return pb.SelfUpdateEligibility(agents_problem="this agent-runner runs no contained self-update")
        agents_problem, workspaces = await self.turns.self_update.eligibility()
        return pb.SelfUpdateEligibility(
            agents_problem=agents_problem,
            workspaces=[
                pb.SelfUpdateWorkspace(workspace_id=found.workspace_id, problem=found.problem) for found in workspaces
            ],
        )

    def _self_update(self) -> SelfUpdate:
        if self.turns.self_update is None:
            raise FailedPrecondition("this agent-runner runs no contained self-update")
        return self.turns.self_update

    async def ListSelfUpdateAttempts(  # type: ignore[override]
        self, request: pb.ListSelfUpdateAttemptsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListSelfUpdateAttemptsResponse:
        found = await self._self_update().attempts.list(request.workspace_id, request.limit or MAX_LISTED)
        return pb.ListSelfUpdateAttemptsResponse(attempts=[_attempt_message(attempt) for attempt in found])

    async def GetSelfUpdateDiff(  # type: ignore[override]
        self, request: pb.SelfUpdateAttemptRequest, context: grpc.aio.ServicerContext
    ) -> pb.SelfUpdateDiff:
        diff, truncated = await self._self_update().diff(request.id)
        return pb.SelfUpdateDiff(diff=diff, truncated=truncated)

    async def DeleteSelfUpdateRef(  # type: ignore[override]
        self, request: pb.SelfUpdateAttemptRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteSelfUpdateRefResponse:
        await self._self_update().delete_ref(request.id)
        return pb.DeleteSelfUpdateRefResponse()

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
                result = await self.turns.run(
                    request,
                    lambda text: events.put_nowait(pb.TaskTurnEvent(progress=text)),
                    lambda wait: events.put_nowait(pb.TaskTurnEvent(approval_wait=wait)),
                )
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
