"""/api routes for background tasks, backed by the tasks service.

Bodies are strict and bounded; the service re-checks every bound and owns the state
rules (what can be cancelled, resolved or deleted). Its refusals map through the
gateway's one gRPC status table: 404 missing, 409 deleting active work, 400 a
resolution of a task that is not failed, cancelled or dead-lettered.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response

from popagent.tasks.v1 import tasks_pb2
from popagent_gateway.deps import TasksStub
from popagent_gateway.dto.tasks import (
    MAX_LIST,
    TaskApprovalWaitOut,
    TaskChannelOut,
    TaskCreate,
    TaskListOut,
    TaskOut,
    TaskResolve,
    TaskStatus,
)
from popagent_gateway.dto.workspaces import OPTIONAL_WORKSPACE_ID_PATTERN
from popagent_gateway.wire import from_message

router = APIRouter(prefix="/tasks", tags=["tasks"])

TaskId = Annotated[str, Path(min_length=1, max_length=64)]


def task_out(task: tasks_pb2.Task) -> TaskOut:
    """The task's answer; a message field has no empty string, so its absence is what is null."""
    wait = task.waiting_for_approval
    return from_message(TaskOut, task).model_copy(
        update={
            "waiting_for_approval": from_message(TaskApprovalWaitOut, wait)
            if task.HasField("waiting_for_approval")
            else None,
            "channel": from_message(TaskChannelOut, task.channel) if task.HasField("channel") else None,
        }
    )


@router.get("", response_model=TaskListOut)
async def list_tasks(
    stub: TasksStub,
    limit: Annotated[int, Query(ge=1, le=MAX_LIST)] = MAX_LIST,
    workspace_id: Annotated[str, Query(alias="workspaceId", pattern=OPTIONAL_WORKSPACE_ID_PATTERN)] = "",
    status: Annotated[TaskStatus | None, Query()] = None,
) -> TaskListOut:
    """Most recent background tasks first, with their latest progress."""
    response = await stub.ListTasks(
        tasks_pb2.ListTasksRequest(limit=limit, workspace_id=workspace_id, status=status or "")
    )
    return TaskListOut(tasks=[task_out(task) for task in response.tasks])


@router.post("", response_model=TaskOut, status_code=201)
async def create_task(body: TaskCreate, stub: TasksStub) -> TaskOut:
    """Queue a background task in a workspace."""
    # The body's fields are the request's, by name; `source` is left to the service (a user task).
    task = await stub.CreateTask(tasks_pb2.CreateTaskRequest(**body.model_dump(by_alias=False)))
    return task_out(task)


@router.get("/{task_id}", response_model=TaskOut)
async def get_task(task_id: TaskId, stub: TasksStub) -> TaskOut:
    """One task with its latest progress."""
    return task_out(await stub.GetTask(tasks_pb2.GetTaskRequest(id=task_id)))


@router.post("/{task_id}/cancel", response_model=TaskOut)
async def cancel_task(task_id: TaskId, stub: TasksStub) -> TaskOut:
    """Cancel queued work at once; running work becomes cancelled once its executor stops."""
    return task_out(await stub.CancelTask(tasks_pb2.CancelTaskRequest(id=task_id)))


@router.post("/{task_id}/resolve", response_model=TaskOut)
async def resolve_task(task_id: TaskId, body: TaskResolve, stub: TasksStub) -> TaskOut:
    """Mark a failed, cancelled or dead-lettered task completed, with evidence."""
    task = await stub.ResolveTask(tasks_pb2.ResolveTaskRequest(id=task_id, evidence=body.evidence))
    return task_out(task)


@router.delete("/{task_id}", status_code=204)
async def delete_task(task_id: TaskId, stub: TasksStub) -> Response:
    """Delete a terminal task record. Never cancels work or rolls anything back."""
    await stub.DeleteTask(tasks_pb2.DeleteTaskRequest(id=task_id))
    return Response(status_code=204)
