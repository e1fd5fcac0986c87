"""The persisted system agents (popagent_agents): list and edit; PostgreSQL is canonical."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from datetime import datetime

import asyncpg
import orjson

from popagent_agent_runner.approvals.policy import Policy
from popagent_core.db import record_of, wrap_db_errors
from popagent_core.errors import FailedPrecondition, InvalidArgument, NotFound

SUPERVISOR_ID = "popagent"
WORKSPACE_ACCESS = ("none", "read-only", "read-write")
BROWSER_ACCESS = ("none", "read-only", "interactive")
_URL = re.compile(r"^https?://[^\s]+$")


@dataclass(frozen=True, slots=True)
class AgentRecord:
    """One persisted agent profile."""

    id: str
    display_name: str
    description: str
    instructions: str
    source_url: str
    workspace_access: str
    browser_access: str
    delegation_eligible: bool
    tools: tuple[str, ...]
    # None: the agent inherits the default model.
    model: str | None
    updated_at: datetime
    # Which tool calls run, ask a person first, or never run (docs/approvals.md).
    tool_approval: Policy = field(default_factory=Policy)


def _agent(row: asyncpg.Record) -> AgentRecord:
    return record_of(
        AgentRecord, row, tools=tuple(row["tools"]), tool_approval=Policy.parse(orjson.loads(row["tool_approval"]))
    )


@dataclass(frozen=True)
class AgentChanges:
    display_name: str | None = None
    description: str | None = None
    instructions: str | None = None
    source_url: str | None = None
    workspace_access: str | None = None
    browser_access: str | None = None
    delegation_eligible: bool | None = None
    tools: list[str] | None = None
    # "" clears the override (inherit); None leaves it unchanged.
    model: str | None = None
    # The new approval policy as its JSON document (a list of rules); None leaves it unchanged.
    tool_approval: object | None = None


def _text(name: str, value: str, lo: int, hi: int) -> str:
    if not lo <= len(value) <= hi or "\x00" in value:
        raise InvalidArgument(f"{name} must be {lo} to {hi} characters")
    return value


def _checked(agent_id: str, current: AgentRecord, changes: AgentChanges, known_tools: tuple[str, ...]) -> AgentRecord:
    """The agent as `changes` would leave it; InvalidArgument naming the first bad field."""
    row = dataclasses.asdict(current)
    if changes.display_name is not None:
        row["display_name"] = _text("displayName", changes.display_name.strip(), 1, 100)
    if changes.description is not None:
        row["description"] = _text("description", changes.description, 1, 2000)
    if changes.instructions is not None:
        row["instructions"] = _text("instructions", changes.instructions, 1, 50_000)
    if changes.source_url is not None:
        if changes.source_url and not _URL.match(changes.source_url):
            raise InvalidArgument("sourceUrl must be an http(s) URL or empty")
        row["source_url"] = _text("sourceUrl", changes.source_url, 0, 2000)
    if changes.workspace_access is not None:
        if changes.workspace_access not in WORKSPACE_ACCESS:
            raise InvalidArgument(f"workspaceAccess must be one of {', '.join(WORKSPACE_ACCESS)}")
        row["workspace_access"] = changes.workspace_access
    if changes.browser_access is not None:
        if changes.browser_access not in BROWSER_ACCESS:
            raise InvalidArgument(f"browserAccess must be one of {', '.join(BROWSER_ACCESS)}")
        row["browser_access"] = changes.browser_access
    if changes.delegation_eligible is not None:
        if changes.delegation_eligible and agent_id == SUPERVISOR_ID:
            # The request is well formed; this agent's role refuses it (409, as for any such state).
            raise FailedPrecondition("delegationEligible: the supervisor cannot be a delegation target")
        row["delegation_eligible"] = changes.delegation_eligible
    if changes.tools is not None:
        unknown = [tool for tool in changes.tools if tool not in known_tools]
        if unknown:
            raise InvalidArgument(f"tools: not registered: {', '.join(unknown)}; registered: {', '.join(known_tools)}")
        if len(set(changes.tools)) != len(changes.tools):
            raise InvalidArgument("tools must not repeat a tool")
        row["tools"] = tuple(changes.tools)
    if changes.model is not None:
        row["model"] = _text("model", changes.model, 1, 200) if changes.model else None
    row["tool_approval"] = current.tool_approval
    if changes.tool_approval is not None:
        row["tool_approval"] = Policy.parse(changes.tool_approval)
    return AgentRecord(**row)


class AgentStore:
    def __init__(self, pool: asyncpg.Pool, queries: dict[str, str], known_tools: tuple[str, ...]) -> None:
        self.pool = pool
        self.q = queries
        # Every tool registry key an agent can be given (the names the model sees and hook
        # matchers use): exactly the registered tools, so no membership names a tool a run cannot offer.
        self.known_tools = known_tools

    async def list(self) -> list[AgentRecord]:
        with wrap_db_errors():
            return [_agent(row) for row in await self.pool.fetch(self.q["list_agents"])]

    async def update(self, agent_id: str, changes: AgentChanges) -> AgentRecord:
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                current = await conn.fetchrow(self.q["lock_agent"], agent_id)
                if current is None:
                    raise NotFound(f"agent {agent_id!r} not found")
                agent = _checked(agent_id, _agent(current), changes, self.known_tools)
                updated = await conn.fetchrow(
                    self.q["update_agent"],
                    agent_id,
                    agent.display_name,
                    agent.description,
                    agent.instructions,
                    agent.source_url,
                    agent.workspace_access,
                    agent.browser_access,
                    agent.delegation_eligible,
                    list(agent.tools),
                    agent.model,
                    orjson.dumps(agent.tool_approval.to_json()).decode(),
                )
        return _agent(updated)
