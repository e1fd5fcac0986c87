"""One failure vocabulary from a task turn to the tasks worker: agent-runner's `TurnFailure`,
the proto `TurnFailureClass` and tasks' retry classes map one to one, with no string in between."""

from __future__ import annotations

import logging

import pytest

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from popagent_agent_runner.failures import PROTO, TurnFailure
from popagent_tasks.agent_runner_executor import CLASS_BY_TURN_FAILURE, error_class_of
from popagent_tasks.model import TRANSIENT, ErrorClass

PROTO_VALUES = set(pb.TurnFailureClass.values()) - {pb.TURN_FAILURE_CLASS_UNSPECIFIED}

# What each turn failure class meant to the tasks worker when it crossed as a string: the
# proto enum must keep every decision (and so which classes retry) as it was.
RETRY_CLASS = {
    "rate_limit": ErrorClass.RATE_LIMIT,
    "quota": ErrorClass.RATE_LIMIT,
    "overloaded": ErrorClass.PROVIDER,
    "unavailable": ErrorClass.PROVIDER,
    "server_error": ErrorClass.PROVIDER,
    "connection": ErrorClass.PROVIDER,
    "provider_error": ErrorClass.PROVIDER,
    "timeout": ErrorClass.TIMEOUT,
    "request_timeout": ErrorClass.TIMEOUT,
    "authentication": ErrorClass.CONFIGURATION,
    "not_found": ErrorClass.CONFIGURATION,
    "context_window": ErrorClass.VALIDATION,
    "rejected": ErrorClass.VALIDATION,
    "stop_blocked": ErrorClass.HOOK_DENIED,
    "framework": ErrorClass.UNKNOWN,
    # Named by the task turn itself before it had a turn class: prompt denied, bad request, deadline.
    "hook_denied": ErrorClass.HOOK_DENIED,
    "invalid_task": ErrorClass.VALIDATION,
    "deadline": ErrorClass.TIMEOUT,
    # Orderly events, released to the queue rather than failed (model.RELEASED).
    "shutdown": ErrorClass.SHUTDOWN,
    "storage": ErrorClass.DATABASE,
    "containment": ErrorClass.CONTAINMENT,
}


def test_every_turn_failure_has_exactly_one_proto_value() -> None:
    assert set(PROTO) == set(TurnFailure)
    assert sorted(PROTO.values()) == sorted(PROTO_VALUES), "a proto value without a TurnFailure, or a duplicate"
    assert all(failure.proto == PROTO[failure] for failure in TurnFailure)


def test_every_proto_failure_class_has_a_retry_class_in_tasks() -> None:
    assert set(CLASS_BY_TURN_FAILURE) == PROTO_VALUES


@pytest.mark.parametrize("failure", list(TurnFailure), ids=str)
def test_each_turn_failure_keeps_its_retry_class(failure: TurnFailure) -> None:
    error_class = error_class_of(failure.proto)
    assert error_class is RETRY_CLASS[failure.value]
    assert (error_class in TRANSIENT) == (RETRY_CLASS[failure.value] in TRANSIENT)


def test_the_expected_table_names_every_class() -> None:
    assert set(RETRY_CLASS) == {failure.value for failure in TurnFailure}


@pytest.mark.parametrize("value", [pb.TURN_FAILURE_CLASS_UNSPECIFIED, 999])
def test_a_class_without_a_mapping_is_logged_and_never_retries(value: int, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="popagent_tasks.agent_runner_executor"):
        assert error_class_of(value) is ErrorClass.UNKNOWN  # type: ignore[arg-type]
    assert "without a retry class" in caplog.text
