"""The real executor: each attempt runs as one agent turn in agent-runner (`RunTask`).

`POPAGENT_TASKS_EXECUTOR=popagent_tasks.agent_runner_executor:executor` with
`POPAGENT_AGENT_RUNNER_ADDR` set. Progress the turn streams is made durable through the
attempt's `report_progress`, and its waits for an approval go to `report_approval_wait` (the worker
stops the attempt's deadline while the turn waits, as agent-runner stops the turn's); the final `result` event is the outcome or a `TaskFailure`
whose class `CLASS_BY_TURN_FAILURE` picks for the turn's failure class. The abort signal cancels the call, which cancels the
turn in agent-runner.

The worker's concurrency and timing are agent-runner's agent-runtime settings, read when
the worker starts and again whenever agent-runner publishes that they changed
(`runtime_config`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from popagent.agent_runner.v1 import agent_runner_pb2_grpc
from popagent_core.errors import ConfigurationError, DeadlineExceeded, PopagentError, Unavailable
from popagent_core.grpc_client import map_rpc_errors, open_channel
from popagent_tasks.executor import AbortSignal, ApprovalWaitReport, Attempt, TaskFailure
from popagent_tasks.model import MAX_ERROR_CHARS, MAX_OUTCOME_CHARS, MAX_REF_CHARS, Backoff, ErrorClass, truncate
from popagent_tasks.settings import Settings
from popagent_tasks.worker import RuntimeConfig

logger = logging.getLogger(__name__)

# agent-runner starts beside this service; the worker waits this long for its settings.
SETTINGS_WAIT_S = 30.0
SETTINGS_CALL_TIMEOUT_S = 5.0


def runtime_from(settings: pb.AgentRuntimeSettings, base: RuntimeConfig) -> RuntimeConfig:
    """The worker's runtime from the agent-runtime settings; the rest (claim batch,
    sweep, staleness, shutdown grace) stays as this process's settings say."""
    heartbeat_timeout_s = settings.task_heartbeat_timeout_ms / 1000
    return dataclasses.replace(
        base,
        concurrency=settings.task_concurrency,
        poll_interval_s=settings.task_poll_interval_ms / 1000,
        heartbeat_interval_s=settings.task_heartbeat_interval_ms / 1000,
        heartbeat_timeout_s=heartbeat_timeout_s,
        task_timeout_s=settings.task_attempt_timeout_ms / 1000,
        abort_ack_s=settings.task_abort_ack_timeout_ms / 1000,
        backoff=Backoff(settings.task_retry_base_ms / 1000, settings.task_retry_cap_ms / 1000),
        stale_after_s=max(base.stale_after_s, heartbeat_timeout_s * 2),
    )


# The one table from agent-runner's turn failure classes to this service's retry classes.
# Transient provider trouble retries (self-update only); a request the provider refuses as
# such, or a misconfigured route, would fail the same way again. A TurnFailureClass value
# without an entry here fails tests/tasks_turns/test_failure_classes.py.
CLASS_BY_TURN_FAILURE: dict[pb.TurnFailureClass, ErrorClass] = {
    pb.TURN_FAILURE_RATE_LIMIT: ErrorClass.RATE_LIMIT,
    pb.TURN_FAILURE_QUOTA: ErrorClass.RATE_LIMIT,
    pb.TURN_FAILURE_OVERLOADED: ErrorClass.PROVIDER,
    pb.TURN_FAILURE_UNAVAILABLE: ErrorClass.PROVIDER,
    pb.TURN_FAILURE_SERVER_ERROR: ErrorClass.PROVIDER,
    pb.TURN_FAILURE_CONNECTION: ErrorClass.PROVIDER,
    pb.TURN_FAILURE_PROVIDER_ERROR: ErrorClass.PROVIDER,
    pb.TURN_FAILURE_TIMEOUT: ErrorClass.TIMEOUT,
    pb.TURN_FAILURE_REQUEST_TIMEOUT: ErrorClass.TIMEOUT,
    pb.TURN_FAILURE_DEADLINE: ErrorClass.TIMEOUT,
    pb.TURN_FAILURE_AUTHENTICATION: ErrorClass.CONFIGURATION,
    pb.TURN_FAILURE_NOT_FOUND: ErrorClass.CONFIGURATION,
    pb.TURN_FAILURE_CONTEXT_WINDOW: ErrorClass.VALIDATION,
    pb.TURN_FAILURE_REJECTED: ErrorClass.VALIDATION,
    pb.TURN_FAILURE_INVALID_TASK: ErrorClass.VALIDATION,
    pb.TURN_FAILURE_HOOK_DENIED: ErrorClass.HOOK_DENIED,
    pb.TURN_FAILURE_STOP_BLOCKED: ErrorClass.HOOK_DENIED,
    pb.TURN_FAILURE_FRAMEWORK: ErrorClass.UNKNOWN,
    # Not failures of the task: the worker releases these attempts to the queue (model.RELEASED).
    pb.TURN_FAILURE_SHUTDOWN: ErrorClass.SHUTDOWN,
    pb.TURN_FAILURE_STORAGE: ErrorClass.DATABASE,
    pb.TURN_FAILURE_CONTAINMENT: ErrorClass.CONTAINMENT,
}


def error_class_of(failure: pb.TurnFailureClass) -> ErrorClass:
    """The retry class of a failed task turn; a class this build does not know is logged, never guessed."""
    error_class = CLASS_BY_TURN_FAILURE.get(failure)
    if error_class is None:
        logger.error("agent-runner sent a turn failure class without a retry class", extra={"failure_class": failure})
        return ErrorClass.UNKNOWN
    return error_class


class AgentRunnerExecutor:
    def __init__(self, address: str, token: str) -> None:
        self.address = address
        self.token = token
        self._channel: grpc.aio.Channel | None = None
        # Sent as the turn's own deadline: past the worker's deadline and abort
        # acknowledgement, so the worker normally decides, and a turn whose call was
        # lost still ends in agent-runner. 0 until the worker's runtime is known.
        self.turn_deadline_s = 0.0
        self._stack = contextlib.AsyncExitStack()

    async def _open(self) -> grpc.aio.Channel:
        if self._channel is None:
            self._channel = await self._stack.enter_async_context(open_channel(self.address, self.token))
        return self._channel

    async def aclose(self) -> None:
        await self._stack.aclose()
        self._channel = None

    async def runtime_config(self, base: RuntimeConfig) -> RuntimeConfig:
        """The agent-runtime settings as the worker's runtime, waiting for agent-runner to answer."""
        stub = agent_runner_pb2_grpc.AgentRunnerStateServiceStub(await self._open())
        deadline = time.monotonic() + SETTINGS_WAIT_S
        delay = 0.1
        while True:
            try:
                with map_rpc_errors():
                    settings = await stub.GetAgentRuntimeSettings(
                        pb.GetAgentRuntimeSettingsRequest(), timeout=SETTINGS_CALL_TIMEOUT_S
                    )
                break
            except (Unavailable, DeadlineExceeded) as exc:
                if time.monotonic() + delay > deadline:
                    raise Unavailable(f"agent-runner settings unavailable at {self.address}: {exc}") from exc
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
        config = runtime_from(settings, base)
        self.turn_deadline_s = config.task_timeout_s + config.abort_ack_s + 1.0
        logger.info(
            "worker runtime from agent-runner's agent-runtime settings",
            extra={
                "address": self.address,
                "concurrency": config.concurrency,
                "task_timeout_s": config.task_timeout_s,
                "retry_base_s": config.backoff.base_s,
            },
        )
        return config

    async def execute(self, attempt: Attempt, abort: AbortSignal) -> str:
        stub = agent_runner_pb2_grpc.AgentRunnerTaskServiceStub(await self._open())
        request = pb.RunTaskRequest(
            task_id=attempt.task_id,
            attempt=attempt.attempt,
            turn_id=attempt.turn_id,
            trace_id=attempt.trace_id,
            prompt=attempt.prompt,
            model=attempt.model,
            session_id=attempt.session_id,
            thread_id=attempt.thread_id,
            workspace_id=attempt.workspace_id,
            execution_source=attempt.source.value,
            kind=attempt.kind.value,
            parent_task_id=attempt.parent_task_id,
            schedule_id=attempt.schedule_id,
            deadline_s=self.turn_deadline_s,
        )
        call = stub.RunTask(request)
        run = asyncio.create_task(self._consume(call, attempt))
        aborted = asyncio.create_task(abort.wait())
        try:
            await asyncio.wait({run, aborted}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            aborted.cancel()
        if not run.done():
            # Cancelling the call cancels the turn in agent-runner.
            call.cancel()
            with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError, PopagentError, TaskFailure):
                await run
            raise TaskFailure(ErrorClass.ABORTED, f"aborted ({abort.reason})")
        return run.result()

    async def _consume(self, call: Any, attempt: Attempt) -> str:
        try:
            return await self._results(call, attempt)
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                raise
            # Not this worker's abort (that cancels the task running this): agent-runner
            # cancelled the call itself, as a stopping server does. The task did not fail.
            raise TaskFailure(
                ErrorClass.INTERRUPTED, "agent-runner cancelled the turn (stopping or restarting)"
            ) from exc

    async def _results(self, call: Any, attempt: Attempt) -> str:
        events: AsyncIterator[pb.TaskTurnEvent] = call.__aiter__()
        with map_rpc_errors():
            async for event in events:
                if event.HasField("progress"):
                    await attempt.report_progress(event.progress)
                    continue
                if event.HasField("approval_wait"):
                    wait = event.approval_wait
                    await attempt.report_approval_wait(
                        ApprovalWaitReport(
                            waiting=wait.waiting,
                            approval_id=truncate(wait.approval_id, MAX_REF_CHARS),
                            tool_name=truncate(wait.tool_name, MAX_REF_CHARS),
                        )
                    )
                    continue
                result = event.result
                if result.ok:
                    return truncate(result.outcome, MAX_OUTCOME_CHARS)
                raise TaskFailure(error_class_of(result.failure_class), truncate(result.error_message, MAX_ERROR_CHARS))
        raise TaskFailure(ErrorClass.INTERRUPTED, "agent-runner ended the task turn without a result")


def executor(settings: Settings) -> AgentRunnerExecutor:
    """The factory `POPAGENT_TASKS_EXECUTOR` names."""
    if not settings.agent_runner_address:
        raise ConfigurationError("the agent-runner executor needs POPAGENT_AGENT_RUNNER_ADDR")
    return AgentRunnerExecutor(settings.agent_runner_address, settings.internal_token)
