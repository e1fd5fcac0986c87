"""The four persisted system agents (popagent, researcher, implementer, reviewer)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field
from pydantic.json_schema import SkipJsonSchema

from popagent_gateway.dto import PatchModel, WireModel
from popagent_gateway.dto.approvals import ApprovalRule, ApprovalRuleOut
from popagent_gateway.dto.models import UnlistedModelOut

WorkspaceAccess = Literal["none", "read-only", "read-write"]
BrowserAccess = Literal["none", "read-only", "interactive"]
ToolKey = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z][A-Za-z0-9_]*$")]
AGENT_ID_PATTERN = r"^[a-z][a-z0-9-]{0,62}$"


class AgentOut(WireModel):
    id: str
    display_name: str
    description: str = Field(description="what the supervisor reads when choosing whom to delegate to")
    instructions: str = Field(description="the complete role instructions")
    source_url: str
    workspace_access: WorkspaceAccess
    browser_access: BrowserAccess
    delegation_eligible: bool
    tools: list[str] = Field(description="tool registry keys")
    model: str | None = Field(description="model override; null inherits the request-selected or default model")
    updated_at: str
    tool_approval: list[ApprovalRuleOut] = Field(
        description="the tool approval policy: which calls run, ask a person first, or never run (docs/approvals.md)"
    )


class AgentListOut(WireModel):
    agents: list[AgentOut]
    known_tools: list[str] = Field(description="every tool registry key an agent may be given (the registered tools)")
    unlisted_models: list[UnlistedModelOut] = Field(
        description="agent model overrides the model catalog does not list; a chat that may run such an agent is "
        "refused until it is changed. Empty while the catalog is unavailable (see `warning`)"
    )
    warning: str | None = Field(default=None, description="set when the catalog is stale or unavailable")


class AgentPatch(PatchModel):
    display_name: Annotated[str, Field(min_length=1, max_length=100)] | SkipJsonSchema[None] = None
    description: Annotated[str, Field(min_length=1, max_length=2000)] | SkipJsonSchema[None] = None
    instructions: Annotated[str, Field(min_length=1, max_length=50_000)] | SkipJsonSchema[None] = None
    source_url: Annotated[str, Field(max_length=2000, pattern=r"^(https?://\S+)?$")] | SkipJsonSchema[None] = None
    workspace_access: WorkspaceAccess | SkipJsonSchema[None] = None
    browser_access: BrowserAccess | SkipJsonSchema[None] = None
    delegation_eligible: bool | SkipJsonSchema[None] = None
    tools: Annotated[list[ToolKey], Field(max_length=32)] | SkipJsonSchema[None] = Field(
        default=None, description="the complete new tool membership: registered tool keys (`knownTools`)"
    )
    model: Annotated[str, Field(min_length=1, max_length=200)] | None = Field(
        default=None, description="a catalog model id, or null to inherit"
    )
    tool_approval: Annotated[list[ApprovalRule], Field(max_length=100)] | SkipJsonSchema[None] = Field(
        default=None, description="the complete new tool approval policy"
    )

    NULLABLE: ClassVar[frozenset[str]] = frozenset({"model"})
