"""/api routes for recurring schedules, backed by the tasks service.

Clients send cron expressions; the timezone is the server's and is not part of any
writable body (extra="forbid" refuses it). Only user schedules can be changed here.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response

from popagent.tasks.v1 import tasks_pb2
from popagent_gateway.deps import TasksStub
from popagent_gateway.dto.schedules import (
    ScheduleCreate,
    ScheduleListOut,
    ScheduleOut,
    SchedulePatch,
)
from popagent_gateway.dto.tasks import TaskChannelOut
from popagent_gateway.dto.workspaces import OPTIONAL_WORKSPACE_ID_PATTERN
from popagent_gateway.wire import from_message

router = APIRouter(prefix="/schedules", tags=["schedules"])


def schedule_out(schedule: tasks_pb2.Schedule) -> ScheduleOut:
    """The schedule's answer; a message field has no empty string, so its absence is what is null."""
    channel = from_message(TaskChannelOut, schedule.channel) if schedule.HasField("channel") else None
    return from_message(ScheduleOut, schedule).model_copy(update={"channel": channel})


ScheduleId = Annotated[str, Path(min_length=1, max_length=64)]


@router.get("", response_model=ScheduleListOut)
async def list_schedules(
    stub: TasksStub,
    workspace_id: Annotated[str, Query(alias="workspaceId", pattern=OPTIONAL_WORKSPACE_ID_PATTERN)] = "",
) -> ScheduleListOut:
    """User and system schedules, oldest first."""
    response = await stub.ListSchedules(tasks_pb2.ListSchedulesRequest(workspace_id=workspace_id))
    return ScheduleListOut(schedules=[schedule_out(s) for s in response.schedules])


@router.post("", response_model=ScheduleOut, status_code=201)
async def create_schedule(body: ScheduleCreate, stub: TasksStub) -> ScheduleOut:
    """Create a user schedule from a five-field cron expression."""
    # The body's fields are the request's, by name (the channel a message of its own).
    fields = body.model_dump(by_alias=False, exclude={"channel"})
    channel = tasks_pb2.TaskChannel(**body.channel.model_dump(by_alias=False)) if body.channel else None
    schedule = await stub.CreateSchedule(tasks_pb2.CreateScheduleRequest(**fields, channel=channel))
    return schedule_out(schedule)


@router.patch("/{schedule_id}", response_model=ScheduleOut)
async def update_schedule(schedule_id: ScheduleId, body: SchedulePatch, stub: TasksStub) -> ScheduleOut:
    """Change a user schedule; fields left out keep their values."""
    changes = body.changes()
    if body.channel is not None:
        changes["channel"] = tasks_pb2.TaskChannel(**body.channel.model_dump(by_alias=False))
    request = tasks_pb2.UpdateScheduleRequest(id=schedule_id, **changes)
    return schedule_out(await stub.UpdateSchedule(request))


@router.delete("/{schedule_id}", status_code=204)
async def delete_schedule(schedule_id: ScheduleId, stub: TasksStub) -> Response:
    """Delete a user schedule. Tasks it already created stay."""
    await stub.DeleteSchedule(tasks_pb2.DeleteScheduleRequest(id=schedule_id))
    return Response(status_code=204)
