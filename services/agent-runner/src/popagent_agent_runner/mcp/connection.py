"""Connections to users' MCP servers: one long-lived MCP session per server in this process.

A connection is opened the first time a turn (or a test of the server) needs it and held by a
background task of its own (the SDK's transports live in the task that entered them). When it
breaks (the server stopped, its stream failed, a call's transport failed) that task reconnects
with capped exponential backoff; a call meanwhile waits at most `connect_wait_s` for it and
otherwise fails at once, saying why, so no tool call hangs on a dead server. Every call is bounded
by the call timeout. Each turn lists the server's tools afresh (within `list_timeout_s`): a server
whose list changed (`notifications/tools/list_changed` or simply a new list) is seen by the next
turn; a server that cannot list keeps the tools it last listed, whose calls say it is unavailable.
A server whose settings change (its row's `updated_at`) gets a new connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from popagent_agent_runner.mcp.oauth import OAuthBearer, OAuthKeeper, ReconnectNeeded
from popagent_agent_runner.mcp.stdio import StdioServer, sandboxed_stdio
from popagent_agent_runner.mcp.store import TokenKeeper
from popagent_agent_runner.workspace.sandbox import Sandbox
from popagent_core.errors import PopagentError, Unavailable

logger = logging.getLogger(__name__)

BACKOFF_FIRST_S = 0.2
BACKOFF_MAX_S = 10.0
CONNECT_TIMEOUT_S = 10.0
# A connection no turn used for this long is closed (a deleted or ungranted server's too).
IDLE_CLOSE_S = 600.0


@dataclass(frozen=True)
class ServerSpec:
    """What a connection is opened from; another spec of the same server is a new connection."""

    id: str
    name: str
    transport: str
    url: str
    token_set: bool
    command: str
    args: tuple[str, ...]
    updated_at: datetime
    auth: str = "bearer"


@dataclass(frozen=True)
class Opened:
    session: ClientSession
    server_name: str
    server_version: str


def describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(describe(inner) for inner in exc.exceptions[:3])
    if isinstance(exc, PopagentError):
        return exc.message
    text = str(exc) or type(exc).__name__
    return text[:300]


# JSON-RPC errors a live server answers about one request (method not found, invalid params, its own
# tool error); any other failure means the session is broken and is reconnected.
_REQUEST_ERRORS = frozenset({-32601, -32602, -32603})


def answered_by_server(exc: BaseException) -> bool:
    return isinstance(exc, MCPError) and exc.error.code in _REQUEST_ERRORS


@contextlib.asynccontextmanager
async def opened(
    spec: ServerSpec,
    *,
    tokens: TokenKeeper,
    oauth: OAuthKeeper,
    sandbox: Sandbox,
    call_timeout_s: float,
    on_message: Any = None,
) -> AsyncIterator[Opened]:
    """An initialized MCP session with the server, for the life of the block."""
    stdio = StdioServer()
    # The last HTTP error status the server answered: the SDK's own error does not name it.
    refusals: list[str] = []

    async def note_refusal(response: httpx2.Response) -> None:
        if response.status_code >= 400:
            refusals.append(f"HTTP {response.status_code} {response.reason_phrase}".strip())

    async with contextlib.AsyncExitStack() as stack:
        if spec.transport == "http":
            headers = {}
            auth: OAuthBearer | None = None
            if spec.auth == "oauth":
                # Before connecting: a server that needs reconnecting says so without a request.
                auth = OAuthBearer(oauth, spec.id, await oauth.access_token(spec.id))
            elif spec.token_set:
                headers["Authorization"] = f"Bearer {await tokens.resolve(spec.id)}"
            http = await stack.enter_async_context(
                httpx2.AsyncClient(
                    headers=headers,
                    auth=auth,
                    timeout=httpx2.Timeout(call_timeout_s, connect=CONNECT_TIMEOUT_S),
                    event_hooks={"response": [note_refusal]},
                )
            )
            read, write = await stack.enter_async_context(streamable_http_client(spec.url, http_client=http))
        else:
            try:
                read, write = await stack.enter_async_context(
                    sandboxed_stdio(sandbox, [spec.command, *spec.args], stdio)
                )
            except PopagentError:
                raise
            except Exception as exc:
                raise Unavailable(f"the server could not be started: {describe(exc)}") from None
        session = await stack.enter_async_context(
            ClientSession(read, write, message_handler=on_message, read_timeout_seconds=call_timeout_s)
        )
        try:
            with anyio.fail_after(CONNECT_TIMEOUT_S + call_timeout_s):
                init = await session.initialize()
        except Exception as exc:
            reason = describe(exc)
            if refusals:
                reason += f" ({refusals[-1]})"
            if spec.transport == "stdio" and stdio.tail():
                reason += f" (its stderr: {stdio.tail()})"
            raise Unavailable(f"the server did not initialize: {reason}") from None
        yield Opened(session, init.server_info.name, init.server_info.version)


class ServerConnection:
    def __init__(
        self,
        spec: ServerSpec,
        *,
        tokens: TokenKeeper,
        oauth: OAuthKeeper,
        sandbox: Sandbox,
        call_timeout_s: float,
        connect_wait_s: float,
    ) -> None:
        self.spec = spec
        self.tokens = tokens
        self.oauth = oauth
        self.sandbox = sandbox
        self.call_timeout_s = call_timeout_s
        self.connect_wait_s = connect_wait_s
        self.tools: list[types.Tool] = []
        self.last_error = ""
        # The last failure was one only the user can fix (connecting an OAuth server again).
        self.needs_user = False
        self.used_at = time.monotonic()
        self._session: ClientSession | None = None
        self._ready = asyncio.Event()
        self._broken = asyncio.Event()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"mcp-{self.spec.name}")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    async def _run(self) -> None:
        delay = BACKOFF_FIRST_S
        while True:
            try:
                await self._hold()
                delay = BACKOFF_FIRST_S
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.needs_user = isinstance(exc, ReconnectNeeded)
                self._set_error(describe(exc))
            self._ready.clear()
            self._session = None
            # A call that finds the server disconnected wakes the loop at once (bounded by backoff).
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)
            self._wake.clear()
            delay = min(delay * 2, BACKOFF_MAX_S)

    def _set_error(self, message: str) -> None:
        if message != self.last_error:
            logger.warning("MCP server unavailable", extra={"server": self.spec.name, "reason": message})
        self.last_error = message

    async def _hold(self) -> None:
        async with opened(
            self.spec,
            tokens=self.tokens,
            oauth=self.oauth,
            sandbox=self.sandbox,
            call_timeout_s=self.call_timeout_s,
            on_message=self._on_message,
        ) as server:
            self._broken.clear()
            self._session = server.session
            self.last_error = ""
            self.needs_user = False
            self._ready.set()
            logger.info("MCP server connected", extra={"server": self.spec.name})
            await self._broken.wait()
            raise Unavailable(self.last_error or "the MCP session broke")

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, Exception):
            self.last_error = f"its stream failed: {describe(message)}"
            self._mark_broken()

    def _mark_broken(self) -> None:
        self._ready.clear()
        self._session = None
        self._broken.set()

    async def session(self) -> ClientSession:
        """The live session, waiting a moment for a (re)connect; else Unavailable with the reason."""
        self.used_at = time.monotonic()
        self.start()
        if not self._ready.is_set():
            self._wake.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._ready.wait(), self.connect_wait_s)
        session = self._session
        if session is None or not self._ready.is_set():
            if self.needs_user:
                raise Unavailable(f"MCP server {self.spec.name}: {self.last_error}")
            raise Unavailable(
                f"MCP server {self.spec.name} is unavailable: {self.last_error or 'not connected yet'}; reconnecting"
            )
        return session

    async def list_tools(self, timeout_s: float) -> list[types.Tool]:
        """The server's tools as it lists them now; the last list when it cannot answer in time."""

        async def listing() -> types.ListToolsResult:
            return await (await self.session()).list_tools()

        try:
            # The wait for a (re)connect included: a turn never waits longer than this for a server.
            listed = await asyncio.wait_for(listing(), timeout_s)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if not isinstance(exc, PopagentError):
                self._failed(f"listing its tools failed: {describe(exc)}", exc)
            return self.tools
        self.tools = list(listed.tools)
        return self.tools

    async def call(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        session = await self.session()
        try:
            # The session's own read timeout bounds the answer; this bounds everything else too.
            return await asyncio.wait_for(
                session.call_tool(name, arguments, read_timeout_seconds=self.call_timeout_s),
                self.call_timeout_s + 1.0,
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            reason = f"the {name} call failed: {describe(exc)}"
            if answered_by_server(exc):
                raise Unavailable(reason) from None
            self._failed(reason, exc)
            raise Unavailable(f"{reason}; reconnecting to MCP server {self.spec.name}") from None

    def _failed(self, reason: str, exc: BaseException) -> None:
        if answered_by_server(exc):
            return
        self.last_error = reason
        self._mark_broken()
