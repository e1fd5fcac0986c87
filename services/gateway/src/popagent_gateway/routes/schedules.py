"""/api routes for recurring schedules, backed by the tasks service.

Clients send cron expressions; the timezone is the server's and is not part of any
writable body (extra="forbid" refuses it). Only user schedules can be changed here.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response
from pydantic import BaseModel, ConfigDict, Field

from popagent.tasks.v1 import tasks_pb2
from popagent_gateway.deps import TasksStub

router = APIRouter(prefix="/schedules", tags=["schedules"])

MAX_PROMPT_CHARS = 32 * 1024
MAX_NAME_CHARS = 200
MAX_REF_CHARS = 200
MAX_CRON_CHARS = 120

ScheduleId = Annotated[str, Path(min_length=1, max_length=64)]


class CreateScheduleBody(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    name: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    prompt: str = Field(min_length=1, max_length=MAX_PROMPT_CHARS)
    cron: str = Field(min_length=1, max_length=MAX_CRON_CHARS)
    workspaceId: str = Field(min_length=1, max_length=MAX_REF_CHARS)
    model: str = Field(default="", max_length=MAX_REF_CHARS)
    sessionId: str = Field(default="", max_length=MAX_REF_CHARS)
    enabled: bool = True
    maxAttempts: int = Field(default=3, ge=1, le=10)


class UpdateScheduleBody(BaseModel):
    """PATCH body: only the fields present change; maxAttempts is kept when absent."""

    model_config = ConfigDict(strict=True, extra="forbid")

    name: str | None = Field(default=None, min_length=1, max_length=MAX_NAME_CHARS)
    prompt: str | None = Field(default=None, min_length=1, max_length=MAX_PROMPT_CHARS)
    cron: str | None = Field(default=None, min_length=1, max_length=MAX_CRON_CHARS)
    model: str | None = Field(default=None, max_length=MAX_REF_CHARS)
    sessionId: str | None = Field(default=None, max_length=MAX_REF_CHARS)
    enabled: bool | None = None
    maxAttempts: int | None = Field(default=None, ge=1, le=10)


class ScheduleOut(BaseModel):
    id: str
    name: str
    prompt: str
    model: str
    sessionId: str | None
    workspaceId: str
    source: str
    cron: str
    timezone: str
    enabled: bool
    maxAttempts: int
    nextRunAt: str | None
    # Preview of the next run times from now, in the server's timezone.
    nextRuns: list[str]
    lastTick: str | None
    createdAt: str
    updatedAt: str


class ScheduleListOut(BaseModel):
    schedules: list[ScheduleOut]


def schedule_out(schedule: tasks_pb2.Schedule) -> ScheduleOut:
    return ScheduleOut(
        id=schedule.id,
        name=schedule.name,
        prompt=schedule.prompt,
        model=schedule.model,
        sessionId=schedule.session_id or None,
        workspaceId=schedule.workspace_id,
        source=schedule.source,
        cron=schedule.cron,
        timezone=schedule.timezone,
        enabled=schedule.enabled,
        maxAttempts=schedule.max_attempts,
        nextRunAt=schedule.next_run_at or None,
        nextRuns=list(schedule.next_runs),
        lastTick=schedule.last_tick or None,
        createdAt=schedule.created_at,
        updatedAt=schedule.updated_at,
    )


@router.get("", response_model=ScheduleListOut)
async def list_schedules(
    stub: TasksStub,
    workspace_id: Annotated[str, Query(alias="workspaceId", max_length=MAX_REF_CHARS)] = "",
) -> ScheduleListOut:
    """User and system schedules, oldest first."""
    response = await stub.ListSchedules(tasks_pb2.ListSchedulesRequest(workspace_id=workspace_id))
    return ScheduleListOut(schedules=[schedule_out(s) for s in response.schedules])


@router.post("", response_model=ScheduleOut, status_code=201)
async def create_schedule(body: CreateScheduleBody, stub: TasksStub) -> ScheduleOut:
    """Create a user schedule from a five-field cron expression."""
    schedule = await stub.CreateSchedule(
        tasks_pb2.CreateScheduleRequest(
            name=body.name,
            prompt=body.prompt,
            cron=body.cron,
            workspace_id=body.workspaceId,
            model=body.model,
            session_id=body.sessionId,
            enabled=body.enabled,
            max_attempts=body.maxAttempts,
        ),
    )
    return schedule_out(schedule)


@router.patch("/{schedule_id}", response_model=ScheduleOut)
async def update_schedule(schedule_id: ScheduleId, body: UpdateScheduleBody, stub: TasksStub) -> ScheduleOut:
    """Change a user schedule; fields left out keep their values."""
    request = tasks_pb2.UpdateScheduleRequest(id=schedule_id)
    for field, value in (
        ("name", body.name),
        ("prompt", body.prompt),
        ("cron", body.cron),
        ("model", body.model),
        ("session_id", body.sessionId),
        ("enabled", body.enabled),
        ("max_attempts", body.maxAttempts),
    ):
        if value is not None:
            setattr(request, field, value)
    return schedule_out(await stub.UpdateSchedule(request))


@router.delete("/{schedule_id}", status_code=204)
async def delete_schedule(schedule_id: ScheduleId, stub: TasksStub) -> Response:
    """Delete a user schedule. Tasks it already created stay."""
    await stub.DeleteSchedule(tasks_pb2.DeleteScheduleRequest(id=schedule_id))
    return Response(status_code=204)
