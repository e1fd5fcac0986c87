"""TasksService: proto <-> repository, plus the checks that belong to the API edge."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import grpc

from popagent.tasks.v1 import tasks_pb2, tasks_pb2_grpc
from popagent_core.auth import caller_var
from popagent_core.errors import InvalidArgument, PermissionDenied
from popagent_tasks import schedules
from popagent_tasks.model import (
    DEFAULT_MAX_ATTEMPTS,
    MAX_ATTEMPTS_LIMIT,
    MAX_EVIDENCE_CHARS,
    MAX_PROMPT_CHARS,
    MAX_REF_CHARS,
    Schedule,
    ScheduleFields,
    Source,
    Status,
    Task,
    TaskChannel,
)
from popagent_tasks.repo import Progress, TaskRepo

LIST_LIMIT = 200
PROGRESS_PER_TASK = 20
MAX_NAME_CHARS = 200


def _ts(value: datetime | None) -> str:
    return value.astimezone(UTC).isoformat() if value is not None else ""


def _with_channel(message: tasks_pb2.Task, channel: TaskChannel | None) -> tasks_pb2.Task:
    if channel is not None:
        message.channel.CopyFrom(
            tasks_pb2.TaskChannel(
                connection_id=channel.connection_id, conversation=channel.conversation, thread=channel.thread
            )
        )
    return message


def _with_schedule_channel(message: tasks_pb2.Schedule, channel: TaskChannel | None) -> tasks_pb2.Schedule:
    if channel is not None:
        message.channel.CopyFrom(
            tasks_pb2.TaskChannel(
                connection_id=channel.connection_id, conversation=channel.conversation, thread=channel.thread
            )
        )
    return message


def task_message(task: Task, progress: list[Progress] | None = None) -> tasks_pb2.Task:
    wait = task.approval_wait
    return tasks_pb2.Task(
        waiting_for_approval=tasks_pb2.TaskApprovalWait(
            approval_id=wait.approval_id, tool_name=wait.tool_name, since=_ts(wait.since)
        )
        if wait is not None
        else None,
        id=str(task.id),
        status=task.status.value,
        source=task.source.value,
        kind=task.kind.value,
        prompt=task.prompt,
        model=task.model,
        session_id=task.session_id,
        thread_id=task.thread_id,
        workspace_id=task.workspace_id,
        schedule_id=str(task.schedule_id or ""),
        parent_task_id=str(task.parent_task_id or ""),
        attempt_count=task.attempt_count,
        max_attempts=task.max_attempts,
        next_attempt_at=_ts(task.next_attempt_at) if task.status is Status.QUEUED else "",
        last_error_class=task.last_error_class or "",
        last_error=task.last_error or "",
        dead_lettered_at=_ts(task.dead_lettered_at),
        outcome=task.outcome or "",
        resolution=task.resolution or "",
        resolved_at=_ts(task.resolved_at),
        started_at=_ts(task.started_at),
        finished_at=_ts(task.finished_at),
        heartbeat_at=_ts(task.heartbeat_at),
        turn_id=str(task.turn_id or ""),
        trace_id=task.trace_id or "",
        tick=_ts(task.tick),
        created_at=_ts(task.created_at),
        updated_at=_ts(task.updated_at),
        progress=[
            tasks_pb2.TaskProgress(attempt=entry.attempt, kind=entry.kind, message=entry.message)
            for entry in progress or ()
        ],
    )


def schedule_message(schedule: Schedule) -> tasks_pb2.Schedule:
    timezone = schedule.timezone or ""
    preview = schedules.preview(schedule.cron, timezone, datetime.now(UTC)) if timezone else []
    return tasks_pb2.Schedule(
        id=str(schedule.id),
        name=schedule.name,
        prompt=schedule.prompt,
        model=schedule.model,
        session_id=schedule.session_id,
        workspace_id=schedule.workspace_id,
        source=schedule.source.value,
        cron=schedule.cron,
        timezone=timezone,
        enabled=schedule.enabled,
        max_attempts=schedule.max_attempts,
        next_run_at=_ts(schedule.next_run_at),
        next_runs=[_ts(run) for run in preview],
        last_tick=_ts(schedule.last_tick),
        created_at=_ts(schedule.created_at),
        updated_at=_ts(schedule.updated_at),
    )


def _bounded(name: str, value: str, limit: int, *, required: bool = False) -> str:
    if required and not value.strip():
        raise InvalidArgument(f"{name} is required")
    if len(value) > limit:
        raise InvalidArgument(f"{name} is longer than {limit} characters")
    return value


def _channel_of(message: tasks_pb2.TaskChannel) -> TaskChannel:
    return TaskChannel(
        connection_id=_bounded("channel.connection_id", message.connection_id, MAX_REF_CHARS, required=True),
        conversation=_bounded("channel.conversation", message.conversation, MAX_REF_CHARS, required=True),
        thread=_bounded("channel.thread", message.thread, MAX_REF_CHARS),
    )


def _max_attempts(value: int) -> int:
    if value == 0:
        return DEFAULT_MAX_ATTEMPTS
    if not 1 <= value <= MAX_ATTEMPTS_LIMIT:
        raise InvalidArgument(f"max_attempts must be between 1 and {MAX_ATTEMPTS_LIMIT}")
    return value


class TasksServicer(tasks_pb2_grpc.TasksServiceServicer):
    def __init__(self, repo: TaskRepo, timezone: str, on_schedule_change: Callable[[], None] | None = None) -> None:
        self.repo = repo
        self.timezone = timezone
        self.on_schedule_change = on_schedule_change or (lambda: None)

    async def _with_progress(self, tasks: list[Task]) -> list[tasks_pb2.Task]:
        progress = await self.repo.recent_progress([task.id for task in tasks], PROGRESS_PER_TASK)
        return [task_message(task, progress.get(task.id)) for task in tasks]

    async def CreateTask(
        self, request: tasks_pb2.CreateTaskRequest, context: grpc.aio.ServicerContext
    ) -> tasks_pb2.Task:
        try:
            source = Source(request.source or Source.USER)
        except ValueError:
            raise InvalidArgument("source must be 'user' or 'self-update'") from None
        if source is Source.SELF_UPDATE and caller_var.get() == "gateway":
            raise PermissionDenied("self-update tasks are created only by the self-update scheduler")
        channel = _channel_of(request.channel) if request.HasField("channel") else None
        task = await self.repo.create_task(
            source=source.value,
            workspace_id=_bounded("workspace_id", request.workspace_id, MAX_REF_CHARS, required=True),
            prompt=_bounded("prompt", request.prompt, MAX_PROMPT_CHARS, required=True),
            model=_bounded("model", request.model, MAX_REF_CHARS),
            session_id=_bounded("session_id", request.session_id, MAX_REF_CHARS),
            max_attempts=_max_attempts(request.max_attempts),
            channel=channel,
        )
        return _with_channel(task_message(task), channel)

    async def GetTask(self, request: tasks_pb2.GetTaskRequest, context: grpc.aio.ServicerContext) -> tasks_pb2.Task:
        task = (await self._with_progress([await self.repo.get_task(request.id)]))[0]
        return _with_channel(task, await self.repo.channel_of(request.id))

    async def ListTasks(
        self, request: tasks_pb2.ListTasksRequest, context: grpc.aio.ServicerContext
    ) -> tasks_pb2.ListTasksResponse:
        if request.status and request.status not in Status.__members__.values():
            raise InvalidArgument(f"unknown status {request.status!r}")
        limit = request.limit or LIST_LIMIT
        if not 1 <= limit <= LIST_LIMIT:
            raise InvalidArgument(f"limit must be between 1 and {LIST_LIMIT}")
        tasks = await self.repo.list_tasks(limit=limit, workspace_id=request.workspace_id, status=request.status)
        return tasks_pb2.ListTasksResponse(tasks=await self._with_progress(tasks))

    async def CancelTask(
        self, request: tasks_pb2.CancelTaskRequest, context: grpc.aio.ServicerContext
    ) -> tasks_pb2.Task:
        return (await self._with_progress([await self.repo.cancel_task(request.id)]))[0]

    async def ResolveTask(
        self, request: tasks_pb2.ResolveTaskRequest, context: grpc.aio.ServicerContext
    ) -> tasks_pb2.Task:
        evidence = _bounded("evidence", request.evidence.strip(), MAX_EVIDENCE_CHARS, required=True)
        return (await self._with_progress([await self.repo.resolve_task(request.id, evidence)]))[0]

    async def DeleteTask(
        self, request: tasks_pb2.DeleteTaskRequest, context: grpc.aio.ServicerContext
    ) -> tasks_pb2.DeleteTaskResponse:
        await self.repo.delete_task(request.id)
        return tasks_pb2.DeleteTaskResponse()

    async def CreateSchedule(
        self, request: tasks_pb2.CreateScheduleRequest, context: grpc.aio.ServicerContext
    ) -> tasks_pb2.Schedule:
        cron = schedules.validate_cron(request.cron)
        channel = _channel_of(request.channel) if request.HasField("channel") else None
        schedule = await self.repo.insert_schedule(
            _bounded("workspace_id", request.workspace_id, MAX_REF_CHARS, required=True),
            ScheduleFields(
                name=_bounded("name", request.name, MAX_NAME_CHARS, required=True),
                prompt=_bounded("prompt", request.prompt, MAX_PROMPT_CHARS, required=True),
                model=_bounded("model", request.model, MAX_REF_CHARS),
                session_id=_bounded("session_id", request.session_id, MAX_REF_CHARS),
                cron=cron,
                timezone=self.timezone,
                next_run_at=schedules.next_run(cron, self.timezone, datetime.now(UTC)),
                enabled=request.enabled,
                max_attempts=_max_attempts(request.max_attempts),
            ),
            channel,
        )
        self.on_schedule_change()
        return _with_schedule_channel(schedule_message(schedule), channel)

    async def ListSchedules(
        self, request: tasks_pb2.ListSchedulesRequest, context: grpc.aio.ServicerContext
    ) -> tasks_pb2.ListSchedulesResponse:
        found = await self.repo.list_schedules(request.workspace_id)
        channels = await self.repo.schedule_channels([schedule.id for schedule in found])
        return tasks_pb2.ListSchedulesResponse(
            schedules=[
                _with_schedule_channel(schedule_message(schedule), channels.get(str(schedule.id))) for schedule in found
            ]
        )

    async def UpdateSchedule(
        self, request: tasks_pb2.UpdateScheduleRequest, context: grpc.aio.ServicerContext
    ) -> tasks_pb2.Schedule:
        cron = schedules.validate_cron(request.cron) if request.HasField("cron") else None
        channel = _channel_of(request.channel) if request.HasField("channel") else None
        if channel is not None and request.remove_channel:
            raise InvalidArgument("send channel or remove_channel, not both")
        max_attempts = _max_attempts(request.max_attempts) if request.HasField("max_attempts") else None

        def change(current: Schedule) -> ScheduleFields:
            new_cron = cron or current.cron
            enabled = request.enabled if request.HasField("enabled") else current.enabled
            # Timing is recomputed only when it changes (new cron, or re-enabled); otherwise
            # the stored next run stands, so an edit never skips or repeats a tick.
            retime = (
                (cron is not None and cron != current.cron)
                or (enabled and not current.enabled)
                or current.next_run_at is None
            )
            return ScheduleFields(
                name=_bounded("name", request.name, MAX_NAME_CHARS, required=True)
                if request.HasField("name")
                else current.name,
                prompt=_bounded("prompt", request.prompt, MAX_PROMPT_CHARS, required=True)
                if request.HasField("prompt")
                else current.prompt,
                model=_bounded("model", request.model, MAX_REF_CHARS) if request.HasField("model") else current.model,
                session_id=_bounded("session_id", request.session_id, MAX_REF_CHARS)
                if request.HasField("session_id")
                else current.session_id,
                cron=new_cron,
                timezone=self.timezone if retime else current.timezone,
                next_run_at=schedules.next_run(new_cron, self.timezone, datetime.now(UTC))
                if retime
                else current.next_run_at,
                enabled=enabled,
                max_attempts=max_attempts if max_attempts is not None else current.max_attempts,
            )

        schedule = await self.repo.update_schedule(request.id, change, channel, request.remove_channel)
        self.on_schedule_change()
        channels = await self.repo.schedule_channels([schedule.id])
        return _with_schedule_channel(schedule_message(schedule), channels.get(str(schedule.id)))

    async def DeleteSchedule(
        self, request: tasks_pb2.DeleteScheduleRequest, context: grpc.aio.ServicerContext
    ) -> tasks_pb2.DeleteScheduleResponse:
        await self.repo.delete_schedule(request.id)
        return tasks_pb2.DeleteScheduleResponse()
