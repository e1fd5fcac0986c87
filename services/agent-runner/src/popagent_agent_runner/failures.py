"""The turn's failure classes: one vocabulary from the model client to the tasks service.

A turn that fails names one `TurnFailure`. Its value is what the UI's `error` event, the
thread's failure outcome and the `StopFailure` hook detail carry; a task turn sends it to
tasks as the proto `TurnFailureClass` through `PROTO` (tasks decides from it whether the
attempt retries). A class added here without a proto value, or the other way round, fails
`tests/tasks_turns/test_failure_classes.py`.
"""

from __future__ import annotations

import enum

from popagent.agent_runner.v1 import agent_runner_pb2 as pb


class TurnFailure(enum.StrEnum):
    # A model request failed (`classify_model_error`), most specific first.
    RATE_LIMIT = "rate_limit"
    QUOTA = "quota"
    OVERLOADED = "overloaded"
    UNAVAILABLE = "unavailable"
    SERVER_ERROR = "server_error"
    CONNECTION = "connection"
    TIMEOUT = "timeout"
    REQUEST_TIMEOUT = "request_timeout"
    AUTHENTICATION = "authentication"
    NOT_FOUND = "not_found"
    CONTEXT_WINDOW = "context_window"
    REJECTED = "rejected"
    PROVIDER_ERROR = "provider_error"
    # Not a provider error at all: the turn's own code or a service it calls.
    FRAMEWORK = "framework"
    # The turn's hooks: UserPromptSubmit denied the prompt; Stop refused completion past the retries.
    HOOK_DENIED = "hook_denied"
    STOP_BLOCKED = "stop_blocked"
    # A task turn only: its request or session could not start a turn; it ran past its deadline.
    INVALID_TASK = "invalid_task"
    DEADLINE = "deadline"
    # Not the turn's fault: agent-runner is shutting down; the database was unreachable.
    SHUTDOWN = "shutdown"
    STORAGE = "storage"
    # A self-update attempt that its containment refused (never retried).
    CONTAINMENT = "containment"

    @property
    def proto(self) -> pb.TurnFailureClass:
        return PROTO[self]


PROTO: dict[TurnFailure, pb.TurnFailureClass] = {
    TurnFailure.RATE_LIMIT: pb.TURN_FAILURE_RATE_LIMIT,
    TurnFailure.QUOTA: pb.TURN_FAILURE_QUOTA,
    TurnFailure.OVERLOADED: pb.TURN_FAILURE_OVERLOADED,
    TurnFailure.UNAVAILABLE: pb.TURN_FAILURE_UNAVAILABLE,
    TurnFailure.SERVER_ERROR: pb.TURN_FAILURE_SERVER_ERROR,
    TurnFailure.CONNECTION: pb.TURN_FAILURE_CONNECTION,
    TurnFailure.TIMEOUT: pb.TURN_FAILURE_TIMEOUT,
    TurnFailure.REQUEST_TIMEOUT: pb.TURN_FAILURE_REQUEST_TIMEOUT,
    TurnFailure.AUTHENTICATION: pb.TURN_FAILURE_AUTHENTICATION,
    TurnFailure.NOT_FOUND: pb.TURN_FAILURE_NOT_FOUND,
    TurnFailure.CONTEXT_WINDOW: pb.TURN_FAILURE_CONTEXT_WINDOW,
    TurnFailure.REJECTED: pb.TURN_FAILURE_REJECTED,
    TurnFailure.PROVIDER_ERROR: pb.TURN_FAILURE_PROVIDER_ERROR,
    TurnFailure.FRAMEWORK: pb.TURN_FAILURE_FRAMEWORK,
    TurnFailure.HOOK_DENIED: pb.TURN_FAILURE_HOOK_DENIED,
    TurnFailure.STOP_BLOCKED: pb.TURN_FAILURE_STOP_BLOCKED,
    TurnFailure.INVALID_TASK: pb.TURN_FAILURE_INVALID_TASK,
    TurnFailure.DEADLINE: pb.TURN_FAILURE_DEADLINE,
    TurnFailure.SHUTDOWN: pb.TURN_FAILURE_SHUTDOWN,
    TurnFailure.STORAGE: pb.TURN_FAILURE_STORAGE,
    TurnFailure.CONTAINMENT: pb.TURN_FAILURE_CONTAINMENT,
}
