"""The BifrOSt MCP client: one long-lived session over streamable HTTP on a protected Unix socket.

BifrOSt is the user's own desktop process: this client never launches or stops it. It connects
only to the socket at `POPAGENT_BROWSER_SOCKET`, and only when that socket belongs to this
process's user and is writable by nobody else (a socket another user can replace would hand
them every filled credential). The server closes its browser when the MCP session ends, so the
session is held for the life of the process; when it breaks (the server was restarted, the
socket went away) a background task reconnects with capped exponential backoff. The tool
catalog is read once per session and again on `notifications/tools/list_changed`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
from mcp import types
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from popagent_core.errors import FailedPrecondition, Unavailable

logger = logging.getLogger(__name__)

BACKOFF_FIRST_S = 0.1
BACKOFF_MAX_S = 5.0


class SocketRefused(FailedPrecondition):
    """The configured socket is missing, not a socket, or not protected."""


def check_socket(path: Path) -> None:
    """Refuse a socket that is missing, is not a socket, belongs to another user or is
    group/world-writable; the message names the path and its mode."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise SocketRefused(f"browser socket {path} does not exist (is BifrOSt running?)") from None
    except OSError as exc:
        raise SocketRefused(f"browser socket {path} cannot be read: {exc.strerror}") from None
    mode = stat.S_IMODE(info.st_mode)
    if not stat.S_ISSOCK(info.st_mode):
        raise SocketRefused(f"browser socket {path} is not a socket (mode {mode:04o})")
    if info.st_uid != os.getuid():
        raise SocketRefused(
            f"browser socket {path} is owned by uid {info.st_uid}, not by this process's uid {os.getuid()} "
            f"(mode {mode:04o})"
        )
    if mode & 0o022:
        raise SocketRefused(f"browser socket {path} is group- or world-writable (mode {mode:04o}); expected 0600")


@dataclass(frozen=True, slots=True)
class Health:
    configured: bool
    reachable: bool
    socket_path: str
    server_name: str
    server_version: str
    tool_count: int
    last_error: str
    connected_at: float | None


class BifrostClient:
    def __init__(self, socket_path: Path | None, url: str, *, call_timeout_s: float, connect_wait_s: float) -> None:
        self.socket_path = socket_path
        self.url = url
        self.call_timeout_s = call_timeout_s
        self.connect_wait_s = connect_wait_s
        self.tools: dict[str, types.Tool] = {}
        self.server_name = ""
        self.server_version = ""
        self.last_error = "" if socket_path else "POPAGENT_BROWSER_SOCKET is not set"
        # Bumped on every new MCP session: what the server held (tabs) is gone with the old one.
        self.generation = 0
        self.on_new_session: Callable[[], Awaitable[None]] | None = None
        self._session: ClientSession | None = None
        self._connected_at: float | None = None
        self._ready = asyncio.Event()
        self._broken = asyncio.Event()
        self._wake = asyncio.Event()
        self._refresh_tools = asyncio.Event()

    def health(self) -> Health:
        return Health(
            configured=self.socket_path is not None,
            reachable=self._session is not None and self._ready.is_set(),
            socket_path=str(self.socket_path or ""),
            server_name=self.server_name,
            server_version=self.server_version,
            tool_count=len(self.tools),
            last_error=self.last_error,
            connected_at=self._connected_at,
        )

    async def run(self) -> None:
        """Hold the session for the life of the process, reconnecting with backoff."""
        if self.socket_path is None:
            return
        delay = BACKOFF_FIRST_S
        while True:
            try:
                check_socket(self.socket_path)
                await self._hold_session(self.socket_path)
                delay = BACKOFF_FIRST_S
            except asyncio.CancelledError:
                raise
            except SocketRefused as exc:
                self._set_error(exc.message)
            except Exception as exc:
                self._set_error(f"browser server at {self.socket_path} failed: {_describe(exc)}")
            self._ready.clear()
            self._session = None
            self.tools = {}
            # A caller that finds the bridge disconnected wakes the loop at once (bounded by backoff).
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)
            self._wake.clear()
            delay = min(delay * 2, BACKOFF_MAX_S)

    def _set_error(self, message: str) -> None:
        if message != self.last_error:
            logger.warning("browser server unavailable", extra={"reason": message})
        self.last_error = message

    async def _hold_session(self, socket_path: Path) -> None:
        transport = httpx2.AsyncHTTPTransport(uds=str(socket_path))
        timeout = httpx2.Timeout(self.call_timeout_s, connect=5.0)
        async with (
            httpx2.AsyncClient(transport=transport, timeout=timeout) as http,
            streamable_http_client(self.url, http_client=http) as (read, write),
            ClientSession(
                read, write, message_handler=self._on_message, read_timeout_seconds=self.call_timeout_s
            ) as session,
        ):
            init = await session.initialize()
            self.server_name = init.server_info.name
            self.server_version = init.server_info.version
            await self._load_tools(session)
            self._broken.clear()
            self._session = session
            self.generation += 1
            self._connected_at = time.time()
            if self.on_new_session is not None:
                await self.on_new_session()
            self.last_error = ""
            self._ready.set()
            logger.info("browser server connected", extra={"server": self.server_name, "tools": len(self.tools)})
            while not self._broken.is_set():
                refresh = asyncio.ensure_future(self._refresh_tools.wait())
                broken = asyncio.ensure_future(self._broken.wait())
                try:
                    await asyncio.wait({refresh, broken}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    refresh.cancel()
                    broken.cancel()
                if self._refresh_tools.is_set():
                    self._refresh_tools.clear()
                    await self._load_tools(session)
            raise Unavailable(self.last_error or "the MCP session broke")

    async def _load_tools(self, session: ClientSession) -> None:
        listed = await session.list_tools()
        self.tools = {tool.name: tool for tool in listed.tools}

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, Exception):
            self.last_error = f"browser server stream failed: {_describe(message)}"
            self._mark_broken()
            return
        inner = getattr(message, "root", message)
        if getattr(inner, "method", None) == "notifications/tools/list_changed":
            self._refresh_tools.set()

    def _mark_broken(self) -> None:
        """No call may use this session any more; the run loop tears it down and reconnects."""
        self._ready.clear()
        self._session = None
        self._broken.set()

    async def session(self) -> ClientSession:
        """The live session, waiting a moment for a reconnect; else Unavailable with the reason."""
        if self.socket_path is None:
            raise Unavailable("the browser is not configured: POPAGENT_BROWSER_SOCKET is not set")
        if not self._ready.is_set():
            self._wake.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._ready.wait(), self.connect_wait_s)
        session = self._session
        if session is None or not self._ready.is_set():
            raise Unavailable(f"the browser is unavailable: {self.last_error or 'not connected yet'}")
        return session

    async def call(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        session = await self.session()
        try:
            return await session.call_tool(name, arguments, read_timeout_seconds=self.call_timeout_s)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            reason = f"browser call {name} failed: {_describe(exc)}"
            if _is_protocol_error(exc):
                raise Unavailable(reason) from None
            self.last_error = reason
            self._mark_broken()
            raise Unavailable(f"{reason}; reconnecting to the browser server") from None


# JSON-RPC errors a live server answers about one request (method not found, invalid params); any
# other failure, "Session terminated" (a 404 from a restarted server) included, means: reconnect.
_REQUEST_ERRORS = frozenset({-32601, -32602})


def _is_protocol_error(exc: Exception) -> bool:
    """An error the server answered about this request, as opposed to a broken transport or session."""
    return isinstance(exc, MCPError) and exc.error.code in _REQUEST_ERRORS


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(inner) for inner in exc.exceptions[:3])
    text = str(exc) or type(exc).__name__
    return text[:300]
