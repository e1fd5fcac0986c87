"""Recurring schedules: cron expressions in the server's timezone.

The timezone is not part of any writable body (unknown fields are refused). Only user
schedules can be changed through the API.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field
from pydantic.json_schema import SkipJsonSchema

from popagent_gateway.dto import PatchModel, WireInput, WireModel

MAX_PROMPT_CHARS = 32 * 1024
MAX_NAME_CHARS = 200
MAX_REF_CHARS = 200
MAX_CRON_CHARS = 120

Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS)]
Prompt = Annotated[str, Field(min_length=1, max_length=MAX_PROMPT_CHARS)]
Cron = Annotated[str, Field(min_length=1, max_length=MAX_CRON_CHARS)]
Ref = Annotated[str, Field(max_length=MAX_REF_CHARS)]
Attempts = Annotated[int, Field(ge=1, le=10)]


class ScheduleCreate(WireInput):
    name: Name
    prompt: Prompt
    cron: Cron
    workspace_id: str = Field(min_length=1, max_length=MAX_REF_CHARS)
    model: Ref = ""
    session_id: Ref = ""
    enabled: bool = True
    max_attempts: Attempts = 3


class SchedulePatch(PatchModel):
    """Only the fields sent change; the others keep their values."""

    name: Name | SkipJsonSchema[None] = None
    prompt: Prompt | SkipJsonSchema[None] = None
    cron: Cron | SkipJsonSchema[None] = None
    model: Ref | SkipJsonSchema[None] = None
    session_id: Ref | SkipJsonSchema[None] = None
    enabled: bool | SkipJsonSchema[None] = None
    max_attempts: Attempts | SkipJsonSchema[None] = None


class ScheduleOut(WireModel):
    id: str
    name: str
    prompt: str
    model: str
    session_id: str | None
    workspace_id: str
    source: str
    cron: str
    timezone: str
    enabled: bool
    max_attempts: int
    next_run_at: str | None
    next_runs: list[str] = Field(description="the next run times from now, in the server's timezone")
    last_tick: str | None
    created_at: str
    updated_at: str


class ScheduleListOut(WireModel):
    schedules: list[ScheduleOut]
