"""/api/browser: the BifrOSt connection's health, the chat sessions' browser tabs, takeover."""

from __future__ import annotations

from popagent_gateway.dto import WireModel


class BrowserHealthOut(WireModel):
    # The socket is configured (POPAGENT_BROWSER_SOCKET) and a live MCP session holds it.
    configured: bool
    reachable: bool
    socket_path: str
    server_name: str
    server_version: str
    tool_count: int
    # Why the browser is unavailable (empty while it works).
    last_error: str
    # The global browser setting.
    enabled: bool


class BrowserSessionOut(WireModel):
    session_id: str
    # A user holds the session's browser: the agent's browser operations are paused.
    taken_over: bool


class BrowserSessionsOut(WireModel):
    sessions: list[BrowserSessionOut]


class BrowserSessionClosedOut(WireModel):
    closed: bool
