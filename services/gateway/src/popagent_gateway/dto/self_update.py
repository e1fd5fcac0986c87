"""Contained self-update as the Autonomy page shows it: the system schedules and each attempt."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from popagent_gateway.dto import WireModel
from popagent_gateway.dto.schedules import ScheduleOut

# `<task id>-<attempt>`, the attempt's branch and ref suffix.
ATTEMPT_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"


class SelfUpdateDelegationOut(WireModel):
    agent_id: str
    status: Literal["completed", "failed", "denied"]


class SelfUpdateStageOut(WireModel):
    stage: str
    ms: int


class SelfUpdateAttemptOut(WireModel):
    id: str = Field(description="`<taskId>-<attempt>`: the branch `autonomous/self-update/<id>` and ref suffix")
    task_id: str
    attempt: int
    workspace_id: str
    status: Literal["running", "imported", "no-op", "refused", "failed"]
    base_commit: str | None = Field(description="the registered checkout's HEAD the attempt started from")
    base_branch: str | None
    branch: str | None
    delegations: list[SelfUpdateDelegationOut] = Field(description="how each delegation ended, in order")
    changed_paths: list[str]
    diff_stat: str
    verification: str = Field(description="what verification said, or why the attempt was refused or failed")
    commit: str | None
    ref: str | None = Field(description="the imported local ref; null when nothing was imported or it was deleted")
    stages: list[SelfUpdateStageOut] = Field(description="how long each stage took, in order")
    created_at: str
    finished_at: str | None


class SelfUpdateOut(WireModel):
    schedules: list[ScheduleOut] = Field(description="the system (source 'self-update') schedules, one per workspace")
    attempts: list[SelfUpdateAttemptOut] = Field(description="the most recent attempts, newest first")


class SelfUpdateDiffOut(WireModel):
    diff: str
    truncated: bool = Field(description="the diff was longer than 256 KiB and is cut there")
