"""The evolution loop's evidence and changes: signals, revisions and reverts (/api/autonomy/*)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from popagent_gateway.dto import WireModel

SignalStatus = Literal["pending", "claimed", "applied", "dismissed", "ignored", "dead_letter"]


class SignalOut(WireModel):
    id: str
    trace_id: str = Field(description="the failing turn's trace (32 hex)")
    turn_id: str
    session_id: str
    agent_id: str
    failure_class: str
    goal: str = Field(description="the turn's goal, bounded and secret-redacted")
    evidence: str = Field(description="what went wrong, bounded and secret-redacted")
    status: SignalStatus
    attempts: int
    max_attempts: int
    due_at: str
    last_error: str
    created_at: str
    updated_at: str


class SignalListOut(WireModel):
    signals: list[SignalOut]


class _Query(BaseModel):
    """Query parameters: camelCase, unknown ones refused."""

    model_config = ConfigDict(extra="forbid")


class SignalListQuery(_Query):
    status: SignalStatus | None = None
    agent_id: str | None = Field(default=None, alias="agentId", max_length=63, pattern=r"^[a-z][a-z0-9-]{0,62}$")
    limit: int = Field(default=50, ge=1, le=200)


class RevisionOut(WireModel):
    id: str
    target_kind: Literal["overlay", "skill"]
    target_key: str = Field(description="`overlay:<agent>` or `skill:<agent>:<name>`")
    agent_id: str
    before: dict[str, Any] | None = Field(description="the managed content before; null: absent")
    after: dict[str, Any] | None = Field(description="the managed content after; null: absent")
    strategy: str = Field(description="the code-owned strategy that made it, or `revert`")
    signal_ids: list[str]
    trace_ids: list[str]
    reverts_revision_id: str | None = Field(description="set on a compensating revision")
    reverted_by_id: str | None = Field(description="the compensating revision, once this one was reverted")
    created_at: str


class RevisionListOut(WireModel):
    revisions: list[RevisionOut]


class RevisionListQuery(_Query):
    agent_id: str | None = Field(default=None, alias="agentId", max_length=63, pattern=r"^[a-z][a-z0-9-]{0,62}$")
    limit: int = Field(default=50, ge=1, le=200)
