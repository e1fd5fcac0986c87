"""/api/browser/*: health, the chat sessions' browser tabs, the screencast and takeover.

Everything comes from browser-bridge, which holds the one MCP session with the BifrOSt server.
The bridge knows no MCP operation that lists browser profiles or recordings, so those two routes
answer 501 with the reason (naming the connected server), never invented data.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request, Response
from fastapi.responses import JSONResponse

from popagent.browser_bridge.v1 import browser_bridge_pb2 as bridge_pb
from popagent.browser_bridge.v1 import navigator_pb2 as pb
from popagent.browser_bridge.v1 import navigator_pb2_grpc
from popagent_gateway.deps import BrowserBridgeStub, cached_stub
from popagent_gateway.dto import ErrorOut
from popagent_gateway.dto.browser import (
    BrowserHealthOut,
    BrowserSessionClosedOut,
    BrowserSessionOut,
    BrowserSessionsOut,
)
from popagent_gateway.dto.sessions import ID_PATTERN
from popagent_gateway.errors import error_body
from popagent_gateway.wire import from_message

router = APIRouter(prefix="/browser", tags=["browser"])

# Browser sessions are the chat sessions' (each with its own tabs): the same id.
SessionId = Annotated[str, Path(pattern=ID_PATTERN, max_length=128, description="the chat session's id")]
# Not POPAGENT_GATEWAY_RPC_TIMEOUT_S: a screenshot waits for the page to render, and closing a tab
# waits for the browser server to close it.
SCREENSHOT_TIMEOUT_S = 30.0


async def _navigator(request: Request) -> navigator_pb2_grpc.BrowserNavigatorServiceStub:
    return cached_stub(request, "browser-bridge", navigator_pb2_grpc.BrowserNavigatorServiceStub)


NavigatorStub = Annotated[navigator_pb2_grpc.BrowserNavigatorServiceStub, Depends(_navigator)]


def _session(session: pb.BrowserSession) -> BrowserSessionOut:
    return BrowserSessionOut(session_id=session.session_id, taken_over=session.taken_over)


@router.get("/health", response_model=BrowserHealthOut)
async def browser_health(navigator: NavigatorStub) -> BrowserHealthOut:
    """Whether the BifrOSt socket is reachable, the server's name and version, its tool count, the last error."""
    return from_message(BrowserHealthOut, await navigator.GetHealth(pb.GetHealthRequest()))


@router.get("/sessions", response_model=BrowserSessionsOut)
async def list_browser_sessions(navigator: NavigatorStub) -> BrowserSessionsOut:
    """The chat sessions that have a browser tab now."""
    listed = await navigator.ListSessions(pb.ListSessionsRequest())
    return BrowserSessionsOut(sessions=[_session(s) for s in listed.sessions])


@router.delete("/sessions/{session_id}", response_model=BrowserSessionClosedOut)
async def close_browser_session(session_id: SessionId, bridge: BrowserBridgeStub) -> BrowserSessionClosedOut:
    """Close a chat session's browser tab (the chat session itself stays)."""
    closed = await bridge.CloseSession(
        bridge_pb.CloseSessionRequest(session_id=session_id), timeout=SCREENSHOT_TIMEOUT_S
    )
    return BrowserSessionClosedOut(closed=closed.closed)


@router.get(
    "/sessions/{session_id}/screenshot",
    response_class=Response,
    responses={200: {"content": {"image/png": {}}, "description": "The current page as PNG"}},
)
async def browser_screenshot(session_id: SessionId, navigator: NavigatorStub) -> Response:
    """The current page of a chat session's browser tab as PNG (the UI polls it as the screencast)."""
    shot = await navigator.Screenshot(pb.ScreenshotRequest(session_id=session_id), timeout=SCREENSHOT_TIMEOUT_S)
    return Response(shot.png, media_type="image/png", headers={"Cache-Control": "no-store"})


@router.post("/sessions/{session_id}/takeover", response_model=BrowserSessionOut)
async def take_over(session_id: SessionId, navigator: NavigatorStub) -> BrowserSessionOut:
    """Hold a chat session's browser: the agent's operations on it pause until it is released."""
    held = await navigator.SetTakeover(pb.SetTakeoverRequest(session_id=session_id, held=True))
    return _session(held.session)


@router.delete("/sessions/{session_id}/takeover", response_model=BrowserSessionOut)
async def release(session_id: SessionId, navigator: NavigatorStub) -> BrowserSessionOut:
    """Give a chat session's browser back to the agent."""
    released = await navigator.SetTakeover(pb.SetTakeoverRequest(session_id=session_id, held=False))
    return _session(released.session)


async def _not_exposed(navigator: NavigatorStub, what: str) -> JSONResponse:
    health = await navigator.GetHealth(pb.GetHealthRequest())
    if not health.reachable:
        reason = f"the browser server is unavailable ({health.last_error or 'not connected'}), so no {what} are known"
    else:
        reason = (
            f"the connected browser server ({health.server_name} {health.server_version}) exposes no {what} "
            f"among its {health.tool_count} tools"
        )
    return JSONResponse(error_body(reason), status_code=501)


@router.get(
    "/profiles",
    status_code=501,
    responses={501: {"model": ErrorOut, "description": "The server exposes no profiles"}},
)
async def browser_profiles(navigator: NavigatorStub) -> JSONResponse:
    """Browser profiles: 501 with the reason (no profile operation is known to the bridge)."""
    return await _not_exposed(navigator, "browser profiles")


@router.get(
    "/sessions/{session_id}/recordings",
    status_code=501,
    responses={501: {"model": ErrorOut, "description": "The server exposes no recordings"}},
)
async def browser_recordings(session_id: SessionId, navigator: NavigatorStub) -> JSONResponse:
    """Recordings of a chat session's browser: 501 with the reason (no recording operation is known)."""
    return await _not_exposed(navigator, "recordings")
