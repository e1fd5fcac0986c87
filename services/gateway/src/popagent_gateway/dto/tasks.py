"""Background tasks: the task with its latest progress, and the create/resolve bodies.

Bodies are strict and bounded; the tasks service re-checks every bound and owns the state
rules (what can be cancelled, resolved or deleted).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from popagent_gateway.dto import NOT_BLANK_SCHEMA, WireInput, WireModel
from popagent_gateway.dto.channels import CHANNEL_ID_PATTERN
from popagent_gateway.dto.sessions import OPTIONAL_SESSION_ID_PATTERN
from popagent_gateway.dto.workspaces import WORKSPACE_ID_PATTERN

MAX_PROMPT_CHARS = 32 * 1024
MAX_EVIDENCE_CHARS = 4 * 1024
MAX_REF_CHARS = 200
MAX_LIST = 200

TaskStatus = Literal["queued", "running", "cancelling", "completed", "failed", "cancelled", "dead-letter"]


class TaskChannelIn(WireInput):
    connection_id: str = Field(pattern=CHANNEL_ID_PATTERN, description="a channel connection's id (GET /api/channels)")
    conversation: str = Field(
        min_length=1,
        max_length=MAX_REF_CHARS,
        json_schema_extra=NOT_BLANK_SCHEMA,
        description="the platform's channel or chat id",
    )
    thread: str = Field(default="", max_length=MAX_REF_CHARS, description="a thread in it; empty: none")


class TaskChannelOut(WireModel):
    connection_id: str
    conversation: str
    thread: str


class TaskCreate(WireInput):
    """POST body. The task is always user-owned; `source` is not writable here."""

    prompt: str = Field(min_length=1, max_length=MAX_PROMPT_CHARS)
    workspace_id: str = Field(pattern=WORKSPACE_ID_PATTERN, description="a registered workspace's id")
    model: str = Field(default="", max_length=MAX_REF_CHARS)
    session_id: str = Field(default="", pattern=OPTIONAL_SESSION_ID_PATTERN, description="empty: a new session")
    max_attempts: int = Field(default=3, ge=1, le=10)
    channel: TaskChannelIn | None = Field(
        default=None, description="post the task's result to this channel connection's conversation when it ends"
    )


class TaskResolve(WireInput):
    evidence: str = Field(min_length=1, max_length=MAX_EVIDENCE_CHARS, json_schema_extra=NOT_BLANK_SCHEMA)


class TaskProgressOut(WireModel):
    attempt: int
    kind: str
    message: str


class TaskApprovalWaitOut(WireModel):
    approval_id: str = Field(description="answer it with POST /api/approvals/{approvalId}")
    tool_name: str
    since: str = Field(description="when the attempt started waiting")


class TaskOut(WireModel):
    id: str
    status: str
    kind: str
    source: str
    prompt: str
    model: str
    session_id: str | None
    thread_id: str = Field(
        description="the thread the task's turns run in: its session's, or, without a session, a thread of its own "
        "(not listed by GET /api/sessions; read it with GET /api/sessions/{threadId})"
    )
    workspace_id: str
    schedule_id: str | None
    tick: str | None
    parent_task_id: str | None
    attempt_count: int
    max_attempts: int
    next_attempt_at: str | None
    last_error_class: str | None
    last_error: str | None
    dead_lettered_at: str | None
    outcome: str | None
    resolution: str | None
    resolved_at: str | None
    started_at: str | None
    finished_at: str | None
    turn_id: str | None
    trace_id: str | None
    created_at: str
    updated_at: str
    progress: list[TaskProgressOut]
    waiting_for_approval: TaskApprovalWaitOut | None = Field(
        description="set while the running attempt waits for a person to answer a tool call's approval "
        "(docs/approvals.md); its attempt timeout does not run meanwhile"
    )
    channel: TaskChannelOut | None = Field(
        default=None, description="where the task's result is posted when it ends (in a task's own answer)"
    )


class TaskListOut(WireModel):
    tasks: list[TaskOut]
