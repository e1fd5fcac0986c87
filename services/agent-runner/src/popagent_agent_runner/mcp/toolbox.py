"""Users' MCP servers' tools in a turn: `mcp__<server>__<tool>`, with the server's input schema.

At a turn's start the servers granted to its agents are read from the database, and each lists its
tools afresh (`connection.py`); an agent gets the tools of its grants (all, or those its grant
names). The tools are ordinary pydantic-ai tools, so their calls pass every step any tool's call
passes (`turn/capability.py`): PreToolUse hooks, the approval gate, the `tool.call` span,
PostToolUse; inside it each call is an `mcp.call` span. A tool whose name the model could not call
(an OpenAI function name is at most 64 letters, digits, `_` or `-`) is left out, and logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types
import orjson
from opentelemetry.trace import Status, StatusCode
from pydantic_ai import RunContext, Tool, ToolFailed

from popagent_agent_runner.mcp.connection import IDLE_CLOSE_S, ServerConnection, ServerSpec, describe, opened
from popagent_agent_runner.mcp.oauth import OAuthKeeper
from popagent_agent_runner.mcp.results import tool_result
from popagent_agent_runner.mcp.store import GrantedServer, McpServerRecord, McpServerStore, TokenKeeper
from popagent_agent_runner.workspace.sandbox import Sandbox
from popagent_core.errors import PopagentError
from popagent_core.telemetry import TRACER

logger = logging.getLogger(__name__)

MODEL_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_DESCRIPTION_CHARS = 2000
EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


def model_tool_name(server: str, tool: str) -> str | None:
    """The name the model sees (Claude Code's), or None when the model could not call it."""
    name = f"mcp__{server}__{tool}"
    return name if MODEL_TOOL_NAME.match(name) else None


@dataclass(frozen=True)
class ListedTool:
    name: str
    description: str
    model_name: str


@dataclass(frozen=True)
class ServerTest:
    ok: bool
    error: str = ""
    server_name: str = ""
    server_version: str = ""
    tools: tuple[ListedTool, ...] = ()


@dataclass
class TurnMcp:
    """The MCP tools of one turn, by agent."""

    by_agent: dict[str, list[Tool[Any]]] = field(default_factory=dict[str, list[Tool[Any]]])

    def tools_for(self, agent_id: str) -> list[Tool[Any]]:
        return list(self.by_agent.get(agent_id, ()))


def _spec(server: GrantedServer | McpServerRecord) -> ServerSpec:
    return ServerSpec(
        id=server.id,
        name=server.name,
        transport=server.transport,
        url=server.url,
        token_set=server.token_set,
        command=server.command,
        args=tuple(server.args),
        updated_at=server.updated_at,
        auth=server.auth,
    )


class McpToolbox:
    def __init__(
        self,
        store: McpServerStore,
        tokens: TokenKeeper,
        oauth: OAuthKeeper,
        sandbox: Sandbox,
        *,
        call_timeout_s: float,
        connect_wait_s: float,
        list_timeout_s: float,
    ) -> None:
        self.store = store
        self.tokens = tokens
        self.oauth = oauth
        self.sandbox = sandbox
        self.call_timeout_s = call_timeout_s
        self.connect_wait_s = connect_wait_s
        self.list_timeout_s = list_timeout_s
        self._connections: dict[str, ServerConnection] = {}
        # Connections being closed (a replaced or idle one), held until they are.
        self._closing: set[asyncio.Task[None]] = set()
        # Tools kept while what the model sees of them is unchanged, so the turn's agents are reused.
        self._tools: dict[tuple[str, str, str, str, str], Tool[Any]] = {}

    def connection(self, spec: ServerSpec) -> ServerConnection:
        current = self._connections.get(spec.id)
        if current is not None and current.spec == spec:
            return current
        if current is not None:
            self._close_later(current)
        fresh = self._connections[spec.id] = ServerConnection(
            spec,
            tokens=self.tokens,
            oauth=self.oauth,
            sandbox=self.sandbox,
            call_timeout_s=self.call_timeout_s,
            connect_wait_s=self.connect_wait_s,
        )
        return fresh

    def _close_idle(self) -> None:
        now = time.monotonic()
        for server_id, connection in list(self._connections.items()):
            if now - connection.used_at > IDLE_CLOSE_S:
                del self._connections[server_id]
                self._close_later(connection)

    def forget(self, server_id: str) -> None:
        """Close this worker's connection to a deleted or changed server now (other workers close
        theirs on their next turn that reads the change, or when idle)."""
        connection = self._connections.pop(server_id, None)
        if connection is not None:
            self._close_later(connection)

    def _close_later(self, connection: ServerConnection) -> None:
        task = asyncio.get_running_loop().create_task(connection.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def for_turn(self, agent_ids: Sequence[str]) -> TurnMcp:
        """The MCP tools each of `agent_ids` gets this turn (none when the servers cannot be read)."""
        self._close_idle()
        try:
            grants = await self.store.granted(agent_ids)
        except PopagentError as exc:
            logger.warning("MCP tools withheld: the servers cannot be read", extra={"error": exc.message})
            return TurnMcp()
        specs = {grant.id: _spec(grant) for grant in grants}
        if not specs:
            return TurnMcp()
        connections = {server_id: self.connection(spec) for server_id, spec in specs.items()}
        listed = await asyncio.gather(
            *(connection.list_tools(self.list_timeout_s) for connection in connections.values())
        )
        tools_of = dict(zip(connections, listed, strict=True))
        turn = TurnMcp()
        for grant in grants:
            offered = turn.by_agent.setdefault(grant.agent_id, [])
            for tool in tools_of[grant.id]:
                if grant.tools and tool.name not in grant.tools:
                    continue
                built = self._tool(specs[grant.id], tool)
                if built is not None:
                    offered.append(built)
        return turn

    def _tool(self, spec: ServerSpec, tool: types.Tool) -> Tool[Any] | None:
        name = model_tool_name(spec.name, tool.name)
        if name is None:
            logger.info("MCP tool left out: its name is not callable", extra={"server": spec.name, "tool": tool.name})
            return None
        schema = tool.input_schema if isinstance(tool.input_schema, dict) and tool.input_schema else EMPTY_SCHEMA
        description = (tool.description or tool.title or f"{tool.name} of MCP server {spec.name}")[
            :MAX_DESCRIPTION_CHARS
        ]
        key = (spec.id, str(spec.updated_at), tool.name, description, orjson.dumps(schema).decode())
        built = self._tools.get(key)
        if built is None:
            if len(self._tools) > 4096:
                self._tools.clear()
            built = self._tools[key] = Tool.from_schema(
                self._caller(spec, tool.name, name),
                name=name,
                description=description,
                json_schema=schema,
                takes_ctx=True,
            )
        return built

    def _caller(self, spec: ServerSpec, tool: str, model_name: str) -> Any:
        async def call_mcp_tool(ctx: RunContext[Any], **arguments: Any) -> Any:
            with TRACER.start_as_current_span(
                "mcp.call",
                attributes={
                    "mcp.server.name": spec.name,
                    "mcp.server.transport": spec.transport,
                    "mcp.tool.name": tool,
                    "gen_ai.tool.name": model_name,
                },
                record_exception=False,
                set_status_on_exception=False,
            ) as span:
                try:
                    result = await self.connection(spec).call(tool, arguments)
                except PopagentError as exc:
                    span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
                    raise ToolFailed(f"{model_name} failed: {exc.message}") from None
                if result.is_error:
                    span.set_status(Status(StatusCode.ERROR, "tool error"))
                return tool_result(spec.name, tool, result)

        return call_mcp_tool

    async def test(self, server: McpServerRecord) -> ServerTest:
        """Connect as a turn would (a connection of its own) and list the server's tools."""
        spec = _spec(server)
        listed: ServerTest | None = None
        try:
            async with opened(
                spec, tokens=self.tokens, oauth=self.oauth, sandbox=self.sandbox, call_timeout_s=self.call_timeout_s
            ) as connected:
                tools = (await asyncio.wait_for(connected.session.list_tools(), self.list_timeout_s)).tools
                listed = ServerTest(
                    ok=True,
                    server_name=connected.server_name,
                    server_version=connected.server_version,
                    tools=tuple(
                        ListedTool(
                            tool.name,
                            (tool.description or "")[:MAX_DESCRIPTION_CHARS],
                            model_tool_name(spec.name, tool.name) or "",
                        )
                        for tool in tools
                    ),
                )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if listed is None:
                return ServerTest(ok=False, error=describe(exc))
            # The tools were listed; only closing the connection failed (a server gone meanwhile).
            logger.info("MCP server test: closing the connection failed", extra={"error": describe(exc)})
        assert listed is not None
        return listed

    async def close(self) -> None:
        connections = list(self._connections.values())
        self._connections.clear()
        for connection in connections:
            with contextlib.suppress(Exception):
                await connection.close()
        if self._closing:
            await asyncio.wait(set(self._closing), timeout=5)
