"""popagent_gateway.wire.from_message: a response shape read from a service's message."""

from __future__ import annotations

from popagent.tasks.v1 import tasks_pb2
from popagent_gateway.dto.tasks import TaskOut, TaskProgressOut
from popagent_gateway.wire import from_message


def test_empty_strings_are_null_only_where_the_shape_takes_null() -> None:
    task = from_message(TaskOut, tasks_pb2.Task(id="t1", status="queued"))
    assert task.id == "t1" and task.status == "queued"
    # Nullable in the shape: proto3's empty string is "not set".
    assert task.session_id is None and task.trace_id is None and task.finished_at is None
    # Not nullable: an empty string stays one.
    assert task.prompt == "" and task.workspace_id == "" and task.created_at == ""
    assert task.progress == []


def test_set_values_nested_and_repeated_messages_are_read_by_field_name() -> None:
    message = tasks_pb2.Task(
        id="t2",
        session_id="s1",
        attempt_count=2,
        progress=[tasks_pb2.TaskProgress(attempt=1, kind="retry_scheduled", message="later")],
    )
    task = from_message(TaskOut, message)
    assert task.session_id == "s1" and task.attempt_count == 2
    assert task.progress == [TaskProgressOut(attempt=1, kind="retry_scheduled", message="later")]
