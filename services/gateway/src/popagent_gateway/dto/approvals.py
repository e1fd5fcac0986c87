"""Tool approvals: pending asks, answers and session grants (docs/approvals.md)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, model_validator
from pydantic.json_schema import SkipJsonSchema

from popagent_gateway.dto import WireInput, WireModel

ApprovalState = Literal["pending", "approved", "denied", "expired"]


class ApprovalRule(WireInput):
    """One rule of an agent's tool approval policy; the strictest rule that applies decides."""

    # The schema says what the validator below checks: exactly one of tool and group is given.
    model_config = ConfigDict(
        json_schema_extra={
            "oneOf": [
                {"required": ["tool"], "properties": {"tool": {"type": "string"}}},
                {"required": ["group"], "properties": {"group": {"type": "string"}}},
            ]
        }
    )

    # Absent, never null (a request body refuses null): the schema leaves null out.
    tool: Annotated[str, Field(min_length=1, max_length=200)] | SkipJsonSchema[None] = Field(
        default=None, description="a tool registry key (exactly one of tool or group)"
    )
    group: Literal["workspace-write", "shell", "browser", "secrets", "delegation"] | SkipJsonSchema[None] = Field(
        default=None, description="a tool group (exactly one of tool or group)"
    )
    decision: Literal["allow", "ask", "deny"]
    unless: Annotated[dict[str, Annotated[str, Field(max_length=500)]], Field(max_length=20)] = Field(
        default_factory=dict,
        description="argument name -> regular expression: the rule does not apply when every named argument "
        "is a string the expression matches in full",
    )

    @model_validator(mode="after")
    def _one_target(self) -> ApprovalRule:
        if (self.tool is None) == (self.group is None):
            raise ValueError("a rule names exactly one of tool or group")
        return self


class ApprovalRuleOut(WireModel):
    tool: str | None = None
    group: str | None = None
    decision: Literal["allow", "ask", "deny"]
    unless: dict[str, str] = Field(default_factory=dict)


class ApprovalOut(WireModel):
    id: str
    session_id: str
    turn_id: str
    tool_call_id: str
    agent_id: str
    tool_name: str
    arguments: dict[str, Any] = Field(description="the call's arguments, credentials redacted as in hook payloads")
    reason: str = Field(description="why it asks: the policy rule, or the hook's reason")
    asked_by: str = Field(description='"policy" or "hook:<handler id>"')
    state: ApprovalState
    scope: Literal["once", "session"] | None = Field(description="for an approval: once, or the rest of the session")
    answered_by: str | None
    answer_reason: str | None = Field(description="the reason a denial or an expiry gives the model")
    created_at: str
    answered_at: str | None
    expires_at: str


class ApprovalListOut(WireModel):
    approvals: list[ApprovalOut]


class ApprovalAnswer(WireInput):
    decision: Literal["approve", "approve-session", "deny"] = Field(
        description="approve once, approve and allow the tool for the rest of the session, or deny"
    )
    reason: Annotated[str, Field(max_length=2000)] = Field(
        default="", description="for a denial: what the model is told"
    )


class ApprovalGrantOut(WireModel):
    session_id: str
    tool_name: str
    granted_by: str
    created_at: str
    approval_id: str


class ApprovalGrantListOut(WireModel):
    grants: list[ApprovalGrantOut]
