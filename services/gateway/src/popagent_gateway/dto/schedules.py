"""Recurring schedules: cron expressions in the server's timezone.

The timezone is not part of any writable body (unknown fields are refused). Only user
schedules can be changed through the API.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, model_validator
from pydantic.json_schema import SkipJsonSchema

from popagent_gateway.dto import PatchModel, WireInput, WireModel
from popagent_gateway.dto.sessions import OPTIONAL_SESSION_ID_PATTERN
from popagent_gateway.dto.tasks import TaskChannelIn, TaskChannelOut
from popagent_gateway.dto.workspaces import WORKSPACE_ID_PATTERN

MAX_PROMPT_CHARS = 32 * 1024
MAX_NAME_CHARS = 200
MAX_REF_CHARS = 200
MAX_CRON_CHARS = 120

Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS)]
Prompt = Annotated[str, Field(min_length=1, max_length=MAX_PROMPT_CHARS)]


def _cron_field(value: str) -> str:
    item = rf"(?:\*|{value}(?:-{value})?)(?:/[1-9][0-9]?)?"
    return rf"{item}(?:,{item}){{0,9}}"


# A standard five-field cron expression in numbers, one space apart: each field `*` or a value
# or range (with an optional /step 1-99), or a list of those; minute 0-59, hour 0-23,
# day-of-month 1-31, month 1-12, day-of-week 0-7 (0 and 7 are Sunday). What the pattern lets
# through, the schedulers' parser (croniter) reads; names (MON, JAN) and macros (@daily) it
# also knows are not part of the API.
CRON_PATTERN = (
    "^"
    + " ".join(
        _cron_field(f"(?:{value})")
        for value in (
            r"0?[0-9]|[1-5][0-9]",
            r"0?[0-9]|1[0-9]|2[0-3]",
            r"0?[1-9]|[12][0-9]|3[01]",
            r"0?[1-9]|1[0-2]",
            r"0?[0-7]",
        )
    )
    + "$"
)
# A form shows it beside a refused value, so it carries an example.
CRON_DESCRIPTION = (
    "five-field cron expression (minute hour day-of-month month day-of-week; e.g. '0 9 * * 1-5' is 09:00 "
    "on weekdays), server timezone"
)
Cron = Annotated[
    str, Field(min_length=9, max_length=MAX_CRON_CHARS, pattern=CRON_PATTERN, description=CRON_DESCRIPTION)
]
Ref = Annotated[str, Field(max_length=MAX_REF_CHARS)]
Attempts = Annotated[int, Field(ge=1, le=10)]
SessionRef = Annotated[str, Field(pattern=OPTIONAL_SESSION_ID_PATTERN, description="empty: a new session per run")]


class ScheduleCreate(WireInput):
    name: Name
    prompt: Prompt
    cron: Cron
    workspace_id: str = Field(pattern=WORKSPACE_ID_PATTERN, description="a registered workspace's id")
    model: Ref = ""
    session_id: SessionRef = ""
    enabled: bool = True
    max_attempts: Attempts = 3
    channel: TaskChannelIn | None = Field(
        default=None,
        description="post each run's result to this channel connection's conversation (its tasks carry it)",
    )


class SchedulePatch(PatchModel):
    """Only the fields sent change; the others keep their values."""

    # channel and removeChannel are not sent together (`_one_channel_change`).
    SCHEMA_RULES: ClassVar[dict[str, Any]] = {"not": {"required": ["channel", "removeChannel"]}}

    name: Name | SkipJsonSchema[None] = None
    prompt: Prompt | SkipJsonSchema[None] = None
    cron: Cron | SkipJsonSchema[None] = None
    model: Ref | SkipJsonSchema[None] = None
    session_id: SessionRef | SkipJsonSchema[None] = None
    enabled: bool | SkipJsonSchema[None] = None
    max_attempts: Attempts | SkipJsonSchema[None] = None
    channel: TaskChannelIn | SkipJsonSchema[None] = Field(
        default=None, description="runs created from now on post their results here"
    )
    remove_channel: Literal[True] | SkipJsonSchema[None] = Field(
        default=None, description="runs created from now on post their results nowhere"
    )

    @model_validator(mode="after")
    def _one_channel_change(self) -> SchedulePatch:
        if self.channel is not None and self.remove_channel:
            raise ValueError("send channel or removeChannel, not both")
        return self


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
    channel: TaskChannelOut | None = Field(default=None, description="where each run's result is posted")


class ScheduleListOut(WireModel):
    schedules: list[ScheduleOut]
