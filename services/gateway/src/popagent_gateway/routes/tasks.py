"""/api routes for background tasks, backed by the tasks service.

Bodies are strict and bounded; the service re-checks every bound and owns the state
rules (what can be cancelled, resolved or deleted). Its refusals map through the
gateway's one gRPC status table: 404 missing, 409 deleting active work, 400 a
resolution of a task that is not failed, cancelled or dead-lettered.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query, Response
from pydantic import BaseModel, ConfigDict, Field

from popagent.tasks.v1 import tasks_pb2
from popagent_gateway.deps import TasksStub

router = APIRouter(prefix="/tasks", tags=["tasks"])

RPC_TIMEOUT_S = 10.0
MAX_PROMPT_CHARS = 32 * 1024
MAX_EVIDENCE_CHARS = 4 * 1024
MAX_REF_CHARS = 200
MAX_LIST = 200

TaskId = Annotated[str, Path(min_length=1, max_length=64)]
TaskStatus = Literal["queued", "running", "cancelling", "completed", "failed", "cancelled", "dead-letter"]


class CreateTaskBody(BaseModel):
    """POST body. The task is always user-owned; `source` is not writable here."""

    model_config = ConfigDict(strict=True, extra="forbid")

    prompt: str = Field(min_length=1, max_length=MAX_PROMPT_CHARS)
    workspaceId: str = Field(min_length=1, max_length=MAX_REF_CHARS)
    model: str = Field(default="", max_length=MAX_REF_CHARS)
    sessionId: str = Field(default="", max_length=MAX_REF_CHARS)
    maxAttempts: int = Field(default=3, ge=1, le=10)


class ResolveTaskBody(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    evidence: str = Field(min_length=1, max_length=MAX_EVIDENCE_CHARS)


class TaskProgressOut(BaseModel):
    attempt: int
    kind: str
    message: str


class TaskOut(BaseModel):
    id: str
    status: str
    kind: str
    source: str
    prompt: str
    model: str
    sessionId: str | None
    threadId: str = Field(
        description="The thread the task's turns run in: its session's, or, without a session, a thread of its own "
        "(not listed by GET /api/sessions; read it with GET /api/sessions/{threadId})."
    )
    workspaceId: str
    scheduleId: str | None
    tick: str | None
    parentTaskId: str | None
    attemptCount: int
    maxAttempts: int
    nextAttemptAt: str | None
    lastErrorClass: str | None
    lastError: str | None
    deadLetteredAt: str | None
    outcome: str | None
    resolution: str | None
    resolvedAt: str | None
    startedAt: str | None
    finishedAt: str | None
    turnId: str | None
    traceId: str | None
    createdAt: str
    updatedAt: str
    progress: list[TaskProgressOut]


class TaskListOut(BaseModel):
    tasks: list[TaskOut]


def _opt(value: str) -> str | None:
    return value or None


def task_out(task: tasks_pb2.Task) -> TaskOut:
    return TaskOut(
        id=task.id,
        status=task.status,
        kind=task.kind,
        source=task.source,
        prompt=task.prompt,
        model=task.model,
        sessionId=_opt(task.session_id),
        threadId=task.thread_id,
        workspaceId=task.workspace_id,
        scheduleId=_opt(task.schedule_id),
        tick=_opt(task.tick),
        parentTaskId=_opt(task.parent_task_id),
        attemptCount=task.attempt_count,
        maxAttempts=task.max_attempts,
        nextAttemptAt=_opt(task.next_attempt_at),
        lastErrorClass=_opt(task.last_error_class),
        lastError=_opt(task.last_error),
        deadLetteredAt=_opt(task.dead_lettered_at),
        outcome=_opt(task.outcome),
        resolution=_opt(task.resolution),
        resolvedAt=_opt(task.resolved_at),
        startedAt=_opt(task.started_at),
        finishedAt=_opt(task.finished_at),
        turnId=_opt(task.turn_id),
        traceId=_opt(task.trace_id),
        createdAt=task.created_at,
        updatedAt=task.updated_at,
        progress=[TaskProgressOut(attempt=p.attempt, kind=p.kind, message=p.message) for p in task.progress],
    )


@router.get("", response_model=TaskListOut)
async def list_tasks(
    stub: TasksStub,
    limit: Annotated[int, Query(ge=1, le=MAX_LIST)] = MAX_LIST,
    workspace_id: Annotated[str, Query(alias="workspaceId", max_length=MAX_REF_CHARS)] = "",
    status: Annotated[TaskStatus | None, Query()] = None,
) -> TaskListOut:
    """Most recent background tasks first, with their latest progress."""
    response = await stub.ListTasks(
        tasks_pb2.ListTasksRequest(limit=limit, workspace_id=workspace_id, status=status or ""), timeout=RPC_TIMEOUT_S
    )
    return TaskListOut(tasks=[task_out(task) for task in response.tasks])


@router.post("", response_model=TaskOut, status_code=201)
async def create_task(body: CreateTaskBody, stub: TasksStub) -> TaskOut:
    """Queue a background task in a workspace."""
    task = await stub.CreateTask(
        tasks_pb2.CreateTaskRequest(
            prompt=body.prompt,
            model=body.model,
            session_id=body.sessionId,
            workspace_id=body.workspaceId,
            max_attempts=body.maxAttempts,
        ),
        timeout=RPC_TIMEOUT_S,
    )
    return task_out(task)


@router.get("/{task_id}", response_model=TaskOut)
async def get_task(task_id: TaskId, stub: TasksStub) -> TaskOut:
    """One task with its latest progress."""
    return task_out(await stub.GetTask(tasks_pb2.GetTaskRequest(id=task_id), timeout=RPC_TIMEOUT_S))


@router.post("/{task_id}/cancel", response_model=TaskOut)
async def cancel_task(task_id: TaskId, stub: TasksStub) -> TaskOut:
    """Cancel queued work at once; running work becomes cancelled once its executor stops."""
    return task_out(await stub.CancelTask(tasks_pb2.CancelTaskRequest(id=task_id), timeout=RPC_TIMEOUT_S))


@router.post("/{task_id}/resolve", response_model=TaskOut)
async def resolve_task(task_id: TaskId, body: ResolveTaskBody, stub: TasksStub) -> TaskOut:
    """Mark a failed, cancelled or dead-lettered task completed, with evidence."""
    task = await stub.ResolveTask(
        tasks_pb2.ResolveTaskRequest(id=task_id, evidence=body.evidence), timeout=RPC_TIMEOUT_S
    )
    return task_out(task)


@router.delete("/{task_id}", status_code=204)
async def delete_task(task_id: TaskId, stub: TasksStub) -> Response:
    """Delete a terminal task record. Never cancels work or rolls anything back."""
    await stub.DeleteTask(tasks_pb2.DeleteTaskRequest(id=task_id), timeout=RPC_TIMEOUT_S)
    return Response(status_code=204)
