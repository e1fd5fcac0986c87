"""The persisted system agents (popagent_agents): list and edit; PostgreSQL is canonical."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import asyncpg

from popagent_core.db import wrap_db_errors
from popagent_core.errors import InvalidArgument, NotFound

SUPERVISOR_ID = "popagent"
# Every tool registry key an agent can be given (the names the model sees and hook
# matchers use). Workspace file and shell tools follow workspace access instead.
KNOWN_TOOLS: tuple[str, ...] = ("getTime", "remember", "recall", "webSearch", "useBrowserSecret", "bifrostNavigator")
WORKSPACE_ACCESS = ("none", "read-only", "read-write")
BROWSER_ACCESS = ("none", "read-only", "interactive")
MAX_TOOLS = len(KNOWN_TOOLS)
_URL = re.compile(r"^https?://[^\s]+$")


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


def _text(name: str, value: str, lo: int, hi: int) -> str:
    if not lo <= len(value) <= hi or "\x00" in value:
        raise InvalidArgument(f"{name} must be {lo} to {hi} characters")
    return value


def _checked(agent_id: str, current: asyncpg.Record, changes: AgentChanges) -> dict[str, Any]:
    row: dict[str, Any] = dict(current)
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
            raise InvalidArgument("delegationEligible: the supervisor cannot be a delegation target")
        row["delegation_eligible"] = changes.delegation_eligible
    if changes.tools is not None:
        unknown = [tool for tool in changes.tools if tool not in KNOWN_TOOLS]
        if unknown:
            raise InvalidArgument(f"tools: unknown tool(s) {', '.join(unknown)}; known: {', '.join(KNOWN_TOOLS)}")
        if len(set(changes.tools)) != len(changes.tools):
            raise InvalidArgument("tools must not repeat a tool")
        row["tools"] = list(changes.tools)
    if changes.model is not None:
        row["model"] = _text("model", changes.model, 1, 200) if changes.model else None
    return row


class AgentStore:
    def __init__(self, pool: asyncpg.Pool, queries: dict[str, str]) -> None:
        self.pool = pool
        self.q = queries

    async def list(self) -> list[asyncpg.Record]:
        with wrap_db_errors():
            return await self.pool.fetch(self.q["list_agents"])

    async def update(self, agent_id: str, changes: AgentChanges) -> asyncpg.Record:
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                current = await conn.fetchrow(self.q["lock_agent"], agent_id)
                if current is None:
                    raise NotFound(f"agent {agent_id!r} not found")
                row = _checked(agent_id, current, changes)
                return await conn.fetchrow(
                    self.q["update_agent"],
                    agent_id,
                    row["display_name"],
                    row["description"],
                    row["instructions"],
                    row["source_url"],
                    row["workspace_access"],
                    row["browser_access"],
                    row["delegation_eligible"],
                    row["tools"],
                    row["model"],
                )
