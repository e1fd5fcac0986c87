"""/api/browser/*: health, the chat sessions' browser tabs, the screencast and takeover, browser
profiles with their network policy, and each session's recording.

Everything comes from browser-bridge, which holds the MCP sessions with the BifrOSt server and
keeps the profiles and recordings in its own tables.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request, Response

from popagent.browser_bridge.v1 import browser_bridge_pb2 as bridge_pb
from popagent.browser_bridge.v1 import navigator_pb2 as pb
from popagent.browser_bridge.v1 import navigator_pb2_grpc
from popagent_gateway.deps import BrowserBridgeStub, cached_stub
from popagent_gateway.dto.browser import (
    BrowserHealthOut,
    BrowserInput,
    BrowserProfileCreate,
    BrowserProfileListOut,
    BrowserProfileOut,
    BrowserProfilePolicy,
    BrowserRecordingFrameOut,
    BrowserRecordingOut,
    BrowserSessionClosedOut,
    BrowserSessionOut,
    BrowserSessionProfileChoice,
    BrowserSessionProfileOut,
    BrowserSessionsOut,
    ProfileName,
)
from popagent_gateway.dto.sessions import ID_PATTERN
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
    return BrowserSessionOut(
        session_id=session.session_id, taken_over=session.taken_over, profile=session.profile or None
    )


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


@router.post("/sessions/{session_id}/input", status_code=204, response_class=Response)
async def browser_input(session_id: SessionId, body: BrowserInput, navigator: NavigatorStub) -> Response:
    """The user's click (at CSS pixels of the screenshot), typed text or key on a chat session's page,
    while they hold it (409 otherwise: take over first). 404 when the session's tab is gone."""
    request = pb.InteractRequest(session_id=session_id)
    if body.click is not None:
        request.click.x, request.click.y = body.click.x, body.click.y
    elif body.key is not None:
        request.key = body.key
    elif body.text is not None:
        request.text = body.text
    await navigator.Interact(request, timeout=SCREENSHOT_TIMEOUT_S)
    return Response(status_code=204)


# -- profiles ------------------------------------------------------------------------------------

ProfilePath = Annotated[ProfileName, Path(description="the profile's name")]


def _profile(profile: bridge_pb.BrowserProfile) -> BrowserProfileOut:
    return BrowserProfileOut(
        name=profile.name,
        allowed_origins=list(profile.allowed_origins),
        blocked_origins=list(profile.blocked_origins),
        session_id=profile.session_id or None,
        created_at=profile.created_at,
    )


@router.get("/profiles", response_model=BrowserProfileListOut)
async def list_profiles(bridge: BrowserBridgeStub) -> BrowserProfileListOut:
    """The browser profiles, each with its network policy and the chat session using it."""
    listed = await bridge.ListProfiles(bridge_pb.ListProfilesRequest())
    return BrowserProfileListOut(profiles=[_profile(p) for p in listed.profiles])


@router.post("/profiles", response_model=BrowserProfileOut, status_code=201)
async def create_profile(body: BrowserProfileCreate, bridge: BrowserBridgeStub) -> BrowserProfileOut:
    """A new profile: an empty browser state in a directory of its own, and its network policy."""
    created = await bridge.CreateProfile(
        bridge_pb.CreateProfileRequest(
            name=body.name, allowed_origins=body.allowed_origins, blocked_origins=body.blocked_origins
        )
    )
    return _profile(created)


@router.put("/profiles/{name}/policy", response_model=BrowserProfileOut)
async def set_profile_policy(
    name: ProfilePath, body: BrowserProfilePolicy, bridge: BrowserBridgeStub
) -> BrowserProfileOut:
    """Replace a profile's allowed and blocked origins; the next browser operation obeys them."""
    updated = await bridge.UpdateProfilePolicy(
        bridge_pb.UpdateProfilePolicyRequest(
            name=name, allowed_origins=body.allowed_origins, blocked_origins=body.blocked_origins
        )
    )
    return _profile(updated)


@router.delete("/profiles/{name}", status_code=204, response_class=Response)
async def delete_profile(name: ProfilePath, bridge: BrowserBridgeStub) -> Response:
    """Delete a profile and its browser state; 409 while a chat session uses it."""
    await bridge.DeleteProfile(bridge_pb.DeleteProfileRequest(name=name))
    return Response(status_code=204)


def _session_profile(chosen: bridge_pb.SessionProfile) -> BrowserSessionProfileOut:
    return BrowserSessionProfileOut(session_id=chosen.session_id, profile=chosen.profile or None)


@router.get("/sessions/{session_id}/profile", response_model=BrowserSessionProfileOut)
async def session_profile(session_id: SessionId, bridge: BrowserBridgeStub) -> BrowserSessionProfileOut:
    """The browser profile a chat session uses (null: the shared default browser context)."""
    return _session_profile(await bridge.GetSessionProfile(bridge_pb.GetSessionProfileRequest(session_id=session_id)))


@router.put("/sessions/{session_id}/profile", response_model=BrowserSessionProfileOut)
async def choose_session_profile(
    session_id: SessionId, body: BrowserSessionProfileChoice, bridge: BrowserBridgeStub
) -> BrowserSessionProfileOut:
    """Use a profile for a chat session's browser. 409 when another session uses it, or while this
    session has browser tabs open (close them first)."""
    chosen = await bridge.SetSessionProfile(
        bridge_pb.SetSessionProfileRequest(session_id=session_id, profile=body.profile), timeout=SCREENSHOT_TIMEOUT_S
    )
    return _session_profile(chosen)


@router.delete("/sessions/{session_id}/profile", response_model=BrowserSessionProfileOut)
async def release_session_profile(session_id: SessionId, bridge: BrowserBridgeStub) -> BrowserSessionProfileOut:
    """Release a chat session's profile (409 while the session has browser tabs open)."""
    released = await bridge.SetSessionProfile(
        bridge_pb.SetSessionProfileRequest(session_id=session_id), timeout=SCREENSHOT_TIMEOUT_S
    )
    return _session_profile(released)


# -- recordings ----------------------------------------------------------------------------------


@router.get("/sessions/{session_id}/recordings", response_model=BrowserRecordingOut)
async def browser_recordings(session_id: SessionId, bridge: BrowserBridgeStub) -> BrowserRecordingOut:
    """A chat session's recording: one frame per browser operation the agent ran (its name, its
    scrubbed arguments, a screenshot after it), oldest first, bounded per session."""
    recording = await bridge.ListRecording(bridge_pb.ListRecordingRequest(session_id=session_id))
    return BrowserRecordingOut(
        session_id=recording.session_id,
        frames=[
            BrowserRecordingFrameOut(
                seq=f.seq,
                taken_at=f.taken_at,
                operation=f.operation,
                arguments_json=f.arguments_json,
                bytes=f.bytes,
                is_error=f.is_error,
            )
            for f in recording.frames
        ],
        max_frames=recording.max_frames,
        max_bytes=recording.max_bytes,
    )


@router.get(
    "/sessions/{session_id}/recordings/{seq}",
    response_class=Response,
    responses={200: {"content": {"image/png": {}}, "description": "The frame's screenshot as PNG"}},
)
async def browser_recording_frame(
    session_id: SessionId,
    seq: Annotated[int, Path(ge=1, le=2**62, description="the frame's number")],
    bridge: BrowserBridgeStub,
) -> Response:
    """One frame's screenshot, as a PNG download."""
    frame = await bridge.GetRecordingFrame(bridge_pb.GetRecordingFrameRequest(session_id=session_id, seq=seq))
    return Response(
        frame.png,
        media_type="image/png",
        headers={"Content-Disposition": f'attachment; filename="{session_id}-{seq}.png"'},
    )
