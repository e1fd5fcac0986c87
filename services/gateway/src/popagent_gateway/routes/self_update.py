"""/api/self-update: contained self-update as it runs (docs/self-update.md).

The system schedules come from the tasks service (ordinary schedule routes cannot change them), the
attempts, their diffs and imported refs from agent-runner, which owns the registered repositories.
Whether self-update runs at all is the autonomy settings' (/api/settings/autonomy).
"""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Path, Query, Response

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from popagent.tasks.v1 import tasks_pb2
from popagent_gateway.deps import AgentRunnerTaskStub, TasksStub
from popagent_gateway.dto.schedules import ScheduleOut
from popagent_gateway.dto.self_update import (
    ATTEMPT_ID_PATTERN,
    SelfUpdateAttemptOut,
    SelfUpdateDiffOut,
    SelfUpdateOut,
)
from popagent_gateway.dto.workspaces import OPTIONAL_WORKSPACE_ID_PATTERN
from popagent_gateway.wire import from_message

router = APIRouter(prefix="/self-update", tags=["autonomy"])

AttemptId = Annotated[str, Path(min_length=1, max_length=100, pattern=ATTEMPT_ID_PATTERN)]
MAX_ATTEMPTS_LISTED = 100


def attempt_out(attempt: pb.SelfUpdateAttempt) -> SelfUpdateAttemptOut:
    return from_message(SelfUpdateAttemptOut, attempt)


@router.get("", response_model=SelfUpdateOut)
async def self_update_state(
    tasks: TasksStub,
    runner: AgentRunnerTaskStub,
    workspace_id: Annotated[str, Query(alias="workspaceId", pattern=OPTIONAL_WORKSPACE_ID_PATTERN)] = "",
    limit: Annotated[int, Query(ge=1, le=MAX_ATTEMPTS_LISTED)] = 50,
) -> SelfUpdateOut:
    """The system schedules and the most recent attempts, newest first."""
    schedules, attempts = await asyncio.gather(
        tasks.ListSchedules(tasks_pb2.ListSchedulesRequest(workspace_id=workspace_id)),
        runner.ListSelfUpdateAttempts(pb.ListSelfUpdateAttemptsRequest(workspace_id=workspace_id, limit=limit)),
    )
    return SelfUpdateOut(
        schedules=[from_message(ScheduleOut, s) for s in schedules.schedules if s.source == "self-update"],
        attempts=[attempt_out(a) for a in attempts.attempts],
    )


@router.get("/attempts/{attempt_id}/diff", response_model=SelfUpdateDiffOut)
async def attempt_diff(attempt_id: AttemptId, runner: AgentRunnerTaskStub) -> SelfUpdateDiffOut:
    """The imported ref's change against the commit it was built on (409 when it has no ref)."""
    found = await runner.GetSelfUpdateDiff(pb.SelfUpdateAttemptRequest(id=attempt_id))
    return SelfUpdateDiffOut(diff=found.diff, truncated=found.truncated)


@router.delete("/attempts/{attempt_id}/ref", status_code=204, response_class=Response)
async def delete_attempt_ref(attempt_id: AttemptId, runner: AgentRunnerTaskStub) -> Response:
    """Remove the attempt's imported ref from the registered repository (409 when it has none); its
    files, index, HEAD and other refs stay as they are."""
    await runner.DeleteSelfUpdateRef(pb.SelfUpdateAttemptRequest(id=attempt_id))
    return Response(status_code=204)
