"""The users' MCP servers (popagent_mcp_servers) and their agent grants; PostgreSQL is canonical.

A server's bearer token never enters this table: it goes to the secrets service (`TokenKeeper`)
under the resource `mcp-servers`, named by the server's id, and the row only says one is set. An
OAuth server's client credentials and tokens go there too (`oauth.py`); the row holds what is public.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Protocol

import asyncpg
import orjson

from popagent_core.db import load_queries, record_of, wrap_db_errors
from popagent_core.errors import AlreadyExists, InvalidArgument, NotFound

QUERIES = load_queries(Path(__file__).parent / "queries.sql")

TRANSPORTS = ("http", "stdio")
AUTHS = ("bearer", "oauth")
# Lowercase words joined by single underscores: `mcp__<name>__<tool>` splits back into server and tool.
SERVER_NAME = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")
MAX_NAME_CHARS = 32
MAX_URL_CHARS = 2000
MAX_TOKEN_CHARS = 8000
MAX_COMMAND_CHARS = 1000
MAX_ARGS = 64
MAX_ARG_CHARS = 8000
MAX_GRANTS = 100
MAX_GRANT_TOOLS = 200
MAX_TOOL_NAME_CHARS = 128
# What an HTTP header carries as a bearer token: printable ASCII, no spaces.
_TOKEN = re.compile(r"^[\x21-\x7e]*$")
_URL = re.compile(r"^https?://[^\s/?#]+(/[^\s]*)?$")
NO_ALLOWED_HOSTS = (
    "allowedHosts is not supported: a stdio server runs in the sandbox, which has no network at all, "
    "and per-host allowances cannot be enforced there; leave it empty"
)


@dataclass(frozen=True, slots=True)
class Grant:
    agent_id: str
    # Empty: every tool the server lists.
    tools: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class McpServerRecord:
    id: str
    name: str
    transport: str
    url: str
    token_set: bool
    command: str
    args: tuple[str, ...]
    enabled: bool
    agents: tuple[Grant, ...]
    created_at: datetime
    updated_at: datetime
    # "bearer" (an optional token) or "oauth"; stdio servers are "bearer" with no token.
    auth: str = "bearer"
    oauth_connected: bool = False
    oauth_expires_at: datetime | None = None
    oauth_error: str = ""


@dataclass(frozen=True, slots=True)
class GrantedServer:
    """An enabled server as a turn connects to it, with the grant of one of the turn's agents."""

    id: str
    name: str
    transport: str
    url: str
    token_set: bool
    command: str
    args: tuple[str, ...]
    updated_at: datetime
    auth: str
    agent_id: str
    tools: tuple[str, ...]


@dataclass(frozen=True)
class McpServerChanges:
    """What a create sets or an update changes; None leaves a field as it is (or its default)."""

    name: str | None = None
    transport: str | None = None
    url: str | None = None
    # A new token; "" removes the stored one.
    token: str | None = None
    command: str | None = None
    args: Sequence[str] | None = None
    enabled: bool | None = None
    agents: Sequence[Grant] | None = None
    allowed_hosts: Sequence[str] = ()
    auth: str | None = None


class TokenKeeper(Protocol):
    """A server's secrets by name: its token under its id, its OAuth client and tokens under names of their own."""

    async def put(self, name: str, value: str, /) -> None: ...

    async def delete(self, name: str, /) -> None: ...

    async def resolve(self, name: str, /) -> str: ...


class OAuthForgetter(Protocol):
    async def forget(self, server_id: str) -> None:
        """Delete the server's OAuth client and tokens from the secrets service."""
        ...


def _server(row: asyncpg.Record) -> McpServerRecord:
    grants = tuple(Grant(g["agent_id"], tuple(g["tools"])) for g in orjson.loads(row["grants"]))
    return record_of(McpServerRecord, row, args=tuple(row["args"]), agents=grants)


def _no_nul(name: str, value: str) -> str:
    if "\x00" in value:
        raise InvalidArgument(f"{name} must not contain a NUL character")
    return value


def _checked(current: McpServerRecord | None, changes: McpServerChanges) -> McpServerRecord:
    """The server as `changes` leave it; InvalidArgument naming the first bad field."""
    if changes.allowed_hosts:
        raise InvalidArgument(NO_ALLOWED_HOSTS)
    name = changes.name if changes.name is not None else (current.name if current else None)
    if name is None:
        raise InvalidArgument("name is required")
    if len(name) > MAX_NAME_CHARS or not SERVER_NAME.fullmatch(name):
        raise InvalidArgument(
            f"name must be 1 to {MAX_NAME_CHARS} lowercase letters and digits, words joined by single "
            "underscores, starting with a letter (the model sees mcp__<name>__<tool>)"
        )
    transport = changes.transport if changes.transport is not None else (current.transport if current else None)
    if transport not in TRANSPORTS:
        raise InvalidArgument(f"transport must be one of {', '.join(TRANSPORTS)}")
    switched = current is not None and current.transport != transport
    url = changes.url if changes.url is not None else ("" if switched or current is None else current.url)
    command = (
        changes.command if changes.command is not None else ("" if switched or current is None else current.command)
    )
    args = tuple(changes.args) if changes.args is not None else (() if switched or current is None else current.args)
    if transport == "http":
        if not url:
            raise InvalidArgument("url is required for an http server")
        if len(url) > MAX_URL_CHARS or not _URL.fullmatch(url):
            raise InvalidArgument(f"url must be an http(s) URL of at most {MAX_URL_CHARS} characters")
        if command or args:
            raise InvalidArgument("command and args are for stdio servers; an http server has a url")
    else:
        if not command:
            raise InvalidArgument("command is required for a stdio server")
        if len(command) > MAX_COMMAND_CHARS:
            raise InvalidArgument(f"command must be at most {MAX_COMMAND_CHARS} characters")
        if url:
            raise InvalidArgument("url is for http servers; a stdio server has a command")
        if changes.token:
            raise InvalidArgument("a token is for http servers; a stdio server gets none")
        if len(args) > MAX_ARGS or any(len(arg) > MAX_ARG_CHARS for arg in args):
            raise InvalidArgument(f"args must be at most {MAX_ARGS} arguments of at most {MAX_ARG_CHARS} characters")
    _no_nul("url", url)
    _no_nul("command", command)
    for arg in args:
        _no_nul("args", arg)
    auth = changes.auth if changes.auth is not None else ("bearer" if current is None or switched else current.auth)
    if auth not in AUTHS:
        raise InvalidArgument(f"auth must be one of {', '.join(AUTHS)}")
    if auth == "oauth" and transport != "http":
        raise InvalidArgument("auth oauth is for http servers")
    if auth == "oauth" and changes.token:
        raise InvalidArgument("an oauth server takes no token: connect it through /oauth/start instead")
    if changes.token is not None:
        if len(changes.token) > MAX_TOKEN_CHARS or not _TOKEN.fullmatch(changes.token):
            raise InvalidArgument(f"token must be at most {MAX_TOKEN_CHARS} printable ASCII characters, no spaces")
        token_set = bool(changes.token)
    else:
        token_set = bool(current and current.token_set and transport == "http")
    if auth == "oauth":
        token_set = False
    agents = tuple(changes.agents) if changes.agents is not None else (current.agents if current else ())
    if len(agents) > MAX_GRANTS:
        raise InvalidArgument(f"agents must name at most {MAX_GRANTS} agents")
    if len({grant.agent_id for grant in agents}) != len(agents):
        raise InvalidArgument("agents must not name an agent twice")
    for grant in agents:
        if len(grant.tools) > MAX_GRANT_TOOLS or any(
            not tool or len(tool) > MAX_TOOL_NAME_CHARS or "\x00" in tool for tool in grant.tools
        ):
            raise InvalidArgument(
                f"agents[].tools must be at most {MAX_GRANT_TOOLS} tool names of 1 to {MAX_TOOL_NAME_CHARS} characters"
            )
    enabled = changes.enabled if changes.enabled is not None else (current.enabled if current else True)
    now = datetime.now().astimezone()
    return McpServerRecord(
        id=current.id if current else f"mcp-{uuid.uuid4().hex}",
        name=name,
        transport=transport,
        url=url,
        token_set=token_set,
        command=command,
        args=args,
        enabled=enabled,
        agents=agents,
        created_at=current.created_at if current else now,
        updated_at=now,
        auth=auth,
    )


def oauth_kept(current: McpServerRecord, server: McpServerRecord) -> bool:
    """Whether an OAuth server's client and tokens still fit it: they are for its url only."""
    return current.auth == "oauth" and server.auth == "oauth" and current.url == server.url


class McpServerStore:
    def __init__(self, pool: asyncpg.Pool, tokens: TokenKeeper, oauth: OAuthForgetter) -> None:
        self.pool = pool
        self.tokens = tokens
        self.oauth = oauth

    async def list(self) -> list[McpServerRecord]:
        with wrap_db_errors():
            return [_server(row) for row in await self.pool.fetch(QUERIES["list_servers"])]

    async def get(self, server_id: str) -> McpServerRecord:
        with wrap_db_errors():
            row = await self.pool.fetchrow(QUERIES["get_server"], server_id)
        if row is None:
            raise NotFound(f"MCP server {server_id!r} not found")
        return _server(row)

    async def create(self, changes: McpServerChanges) -> McpServerRecord:
        server = _checked(None, changes)
        async with self.pool.acquire() as conn, conn.transaction():
            with wrap_db_errors():
                await _write_row(conn, QUERIES["insert_server"], server)
                await self._grant(conn, server)
            # Stored before the row commits: a failed store leaves no server claiming a token.
            if changes.token:
                await self.tokens.put(server.id, changes.token)
        return await self.get(server.id)

    async def update(self, server_id: str, changes: McpServerChanges) -> McpServerRecord:
        current = await self.get(server_id)
        server = _checked(current, changes)
        async with self.pool.acquire() as conn, conn.transaction():
            with wrap_db_errors():
                if await conn.fetchrow(QUERIES["lock_server"], server_id) is None:
                    raise NotFound(f"MCP server {server_id!r} not found")
                await _write_row(conn, QUERIES["update_server"], server)
                forget_oauth = current.auth == "oauth" and not oauth_kept(current, server)
                if forget_oauth:
                    await conn.execute(QUERIES["clear_oauth"], server.id)
                if changes.agents is not None:
                    await conn.execute(QUERIES["delete_grants"], server.id)
                    await self._grant(conn, server)
            if changes.token:
                await self.tokens.put(server.id, changes.token)
            elif current.token_set and not server.token_set:
                await self.tokens.delete(server.id)
            if forget_oauth:
                await self.oauth.forget(server.id)
        return await self.get(server.id)

    async def delete(self, server_id: str) -> None:
        async with self.pool.acquire() as conn, conn.transaction():
            with wrap_db_errors():
                deleted = await conn.fetchrow(QUERIES["delete_server"], server_id)
            if deleted is None:
                raise NotFound(f"MCP server {server_id!r} not found")
            if deleted["token_set"]:
                await self.tokens.delete(server_id)
            if deleted["auth"] == "oauth":
                await self.oauth.forget(server_id)

    async def granted(self, agent_ids: Sequence[str]) -> list[GrantedServer]:
        """The enabled servers granted to any of `agent_ids`, one record per grant."""
        with wrap_db_errors():
            rows = await self.pool.fetch(QUERIES["granted_servers"], list(agent_ids))
        return [record_of(GrantedServer, row, args=tuple(row["args"]), tools=tuple(row["tools"])) for row in rows]

    @staticmethod
    async def _grant(conn: asyncpg.pool.PoolConnectionProxy, server: McpServerRecord) -> None:
        for grant in server.agents:
            try:
                await conn.execute(QUERIES["insert_grant"], server.id, grant.agent_id, list(grant.tools))
            except asyncpg.ForeignKeyViolationError:
                raise NotFound(f"agents: no agent {grant.agent_id!r}") from None


async def _write_row(conn: asyncpg.pool.PoolConnectionProxy, query: str, server: McpServerRecord) -> None:
    """Insert or update (`query`) the server's row; a name another server has is AlreadyExists."""
    try:
        await conn.execute(
            query,
            server.id,
            server.name,
            server.transport,
            server.url,
            server.token_set,
            server.command,
            list(server.args),
            server.enabled,
            server.auth,
        )
    except asyncpg.UniqueViolationError:
        raise AlreadyExists(f"an MCP server named {server.name!r} exists already") from None
