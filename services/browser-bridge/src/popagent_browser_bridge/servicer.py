"""BrowserBridgeService and BrowserNavigatorService: proto <-> repository and navigator only."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from popagent.browser_bridge.v1 import browser_bridge_pb2, browser_bridge_pb2_grpc, navigator_pb2, navigator_pb2_grpc
from popagent_browser_bridge.navigator import TAB_GONE, UserInput
from popagent_browser_bridge.profiles import Browsers
from popagent_browser_bridge.repo import BrowserProfile, BrowserSettings, BrowserSettingsRepo
from popagent_core.auth import caller_var
from popagent_core.errors import InvalidArgument, NotFound, PermissionDenied

MAX_ARGUMENTS_BYTES = 256 * 1024
# The tools run in agent-runner's turns; the browser routes are the gateway's.
TOOL_CALLERS = frozenset({"agent-runner"})
ROUTE_CALLERS = frozenset({"gateway"})
# A session's tab is closed by the gateway's route, by agent-runner when the session is deleted
# and by tasks when a task ends; nothing else opens or reads a tab through this call.
CLOSE_CALLERS = frozenset({"gateway", "agent-runner", "tasks"})


def _require(allowed: frozenset[str], action: str) -> None:
    caller = caller_var.get()
    if caller not in allowed:
        raise PermissionDenied(f"caller {caller or 'unknown'} may not {action}")


def _message(settings: BrowserSettings) -> browser_bridge_pb2.BrowserSettings:
    return browser_bridge_pb2.BrowserSettings(
        enabled=settings.enabled,
        allow_code_execution=settings.allow_code_execution,
        updated_at=settings.updated_at.isoformat(),
    )


def _profile(profile: BrowserProfile) -> browser_bridge_pb2.BrowserProfile:
    return browser_bridge_pb2.BrowserProfile(
        name=profile.name,
        allowed_origins=profile.allowed_origins,
        blocked_origins=profile.blocked_origins,
        session_id=profile.session_id or "",
        created_at=profile.created_at.isoformat(),
    )


class BrowserBridgeServicer(browser_bridge_pb2_grpc.BrowserBridgeServiceServicer):
    def __init__(
        self,
        settings: BrowserSettingsRepo,
        browsers: Browsers,
        changed: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.settings = settings
        self.browsers = browsers
        self.navigator = browsers.default
        # Says a committed change to the runners' cached copies before the update is answered.
        self.changed = changed

    async def GetBrowserSettings(
        self, request: browser_bridge_pb2.GetBrowserSettingsRequest, context: grpc.aio.ServicerContext
    ) -> browser_bridge_pb2.BrowserSettings:
        settings = await self.settings.get()
        self.navigator.gate.apply(settings)
        return _message(settings)

    async def UpdateBrowserSettings(
        self, request: browser_bridge_pb2.UpdateBrowserSettingsRequest, context: grpc.aio.ServicerContext
    ) -> browser_bridge_pb2.BrowserSettings:
        # The gate is what every browser call checks (before and after the call), so a change
        # applies at once, to calls in flight too.
        settings = await self.settings.update(
            request.enabled if request.HasField("enabled") else None,
            request.allow_code_execution if request.HasField("allow_code_execution") else None,
        )
        self.navigator.gate.apply(settings)
        if self.changed is not None:
            await self.changed()
        return _message(settings)

    async def CloseSession(
        self, request: browser_bridge_pb2.CloseSessionRequest, context: grpc.aio.ServicerContext
    ) -> browser_bridge_pb2.CloseSessionResponse:
        _require(CLOSE_CALLERS, "close a browser session")
        closed = await self.browsers.close_session(request.session_id, deleted=request.session_deleted)
        return browser_bridge_pb2.CloseSessionResponse(closed=closed)

    async def ListProfiles(
        self, request: browser_bridge_pb2.ListProfilesRequest, context: grpc.aio.ServicerContext
    ) -> browser_bridge_pb2.ListProfilesResponse:
        _require(ROUTE_CALLERS, "list browser profiles")
        return browser_bridge_pb2.ListProfilesResponse(profiles=[_profile(p) for p in await self.browsers.repo.list()])

    async def CreateProfile(
        self, request: browser_bridge_pb2.CreateProfileRequest, context: grpc.aio.ServicerContext
    ) -> browser_bridge_pb2.BrowserProfile:
        _require(ROUTE_CALLERS, "create browser profiles")
        return _profile(
            await self.browsers.create(request.name, list(request.allowed_origins), list(request.blocked_origins))
        )

    async def UpdateProfilePolicy(
        self, request: browser_bridge_pb2.UpdateProfilePolicyRequest, context: grpc.aio.ServicerContext
    ) -> browser_bridge_pb2.BrowserProfile:
        _require(ROUTE_CALLERS, "change browser profiles")
        return _profile(
            await self.browsers.update_policy(
                request.name, list(request.allowed_origins), list(request.blocked_origins)
            )
        )

    async def DeleteProfile(
        self, request: browser_bridge_pb2.DeleteProfileRequest, context: grpc.aio.ServicerContext
    ) -> browser_bridge_pb2.DeleteProfileResponse:
        _require(ROUTE_CALLERS, "delete browser profiles")
        await self.browsers.delete(request.name)
        return browser_bridge_pb2.DeleteProfileResponse()

    async def GetSessionProfile(
        self, request: browser_bridge_pb2.GetSessionProfileRequest, context: grpc.aio.ServicerContext
    ) -> browser_bridge_pb2.SessionProfile:
        _require(ROUTE_CALLERS, "read a session's browser profile")
        return browser_bridge_pb2.SessionProfile(
            session_id=request.session_id, profile=self.browsers.bindings.get(request.session_id, "")
        )

    async def SetSessionProfile(
        self, request: browser_bridge_pb2.SetSessionProfileRequest, context: grpc.aio.ServicerContext
    ) -> browser_bridge_pb2.SessionProfile:
        _require(ROUTE_CALLERS, "choose a session's browser profile")
        await self.browsers.choose(request.session_id, request.profile)
        return browser_bridge_pb2.SessionProfile(
            session_id=request.session_id, profile=self.browsers.bindings.get(request.session_id, "")
        )

    async def ListRecording(
        self, request: browser_bridge_pb2.ListRecordingRequest, context: grpc.aio.ServicerContext
    ) -> browser_bridge_pb2.Recording:
        _require(ROUTE_CALLERS, "read browser recordings")
        recordings = self.browsers.recordings
        return browser_bridge_pb2.Recording(
            session_id=request.session_id,
            frames=[
                browser_bridge_pb2.RecordingFrame(
                    seq=frame.seq,
                    taken_at=frame.taken_at.isoformat(),
                    operation=frame.operation,
                    arguments_json=frame.arguments_json,
                    bytes=frame.bytes,
                    is_error=frame.is_error,
                )
                for frame in await recordings.frames(request.session_id)
            ],
            max_frames=recordings.max_frames,
            max_bytes=recordings.max_bytes,
        )

    async def GetRecordingFrame(
        self, request: browser_bridge_pb2.GetRecordingFrameRequest, context: grpc.aio.ServicerContext
    ) -> browser_bridge_pb2.RecordingFrameImage:
        _require(ROUTE_CALLERS, "read browser recordings")
        return browser_bridge_pb2.RecordingFrameImage(
            png=await self.browsers.recordings.image(request.session_id, request.seq)
        )


def _arguments(raw: str) -> dict[str, Any]:
    if len(raw) > MAX_ARGUMENTS_BYTES:
        raise InvalidArgument(f"arguments must be at most {MAX_ARGUMENTS_BYTES} bytes of JSON")
    try:
        value = json.loads(raw or "{}")
    except ValueError:
        raise InvalidArgument("arguments must be a JSON object") from None
    if not isinstance(value, dict):
        raise InvalidArgument("arguments must be a JSON object")
    return value


class BrowserNavigatorServicer(navigator_pb2_grpc.BrowserNavigatorServiceServicer):
    def __init__(self, browsers: Browsers) -> None:
        self.browsers = browsers
        self.navigator = browsers.default

    async def Navigate(
        self, request: navigator_pb2.NavigateRequest, context: grpc.aio.ServicerContext
    ) -> navigator_pb2.NavigateResponse:
        _require(TOOL_CALLERS, "run browser operations")
        navigator = await self.browsers.navigator_for(request.session_id)
        outcome = await navigator.navigate(
            request.session_id, request.browser_access, request.operation, _arguments(request.arguments_json)
        )
        return navigator_pb2.NavigateResponse(
            content=[
                navigator_pb2.ContentPart(kind=p.kind, text=p.text, mime_type=p.mime_type, data=p.data, uri=p.uri)
                for p in outcome.parts
            ],
            is_error=outcome.is_error,
        )

    async def UseSecret(
        self, request: navigator_pb2.UseSecretRequest, context: grpc.aio.ServicerContext
    ) -> navigator_pb2.UseSecretResponse:
        _require(TOOL_CALLERS, "fill browser secrets")
        navigator = await self.browsers.navigator_for(request.session_id)
        origin, success = await navigator.use_secret(
            request.session_id, request.browser_access, request.resource_id, request.name, request.element
        )
        return navigator_pb2.UseSecretResponse(name=request.name, origin=origin, success=success)

    async def GetHealth(
        self, request: navigator_pb2.GetHealthRequest, context: grpc.aio.ServicerContext
    ) -> navigator_pb2.BrowserHealth:
        health = self.navigator.client.health()
        return navigator_pb2.BrowserHealth(
            configured=health.configured,
            reachable=health.reachable,
            socket_path=health.socket_path,
            server_name=health.server_name,
            server_version=health.server_version,
            tool_count=health.tool_count,
            last_error=health.last_error,
            enabled=self.navigator.gate.enabled,
        )

    def _session(self, session_id: str) -> navigator_pb2.BrowserSession:
        return navigator_pb2.BrowserSession(
            session_id=session_id,
            taken_over=session_id in self.navigator.takeovers,
            profile=self.browsers.bindings.get(session_id, ""),
        )

    async def ListSessions(
        self, request: navigator_pb2.ListSessionsRequest, context: grpc.aio.ServicerContext
    ) -> navigator_pb2.ListSessionsResponse:
        return navigator_pb2.ListSessionsResponse(
            sessions=[self._session(s) for s in await self.browsers.list_sessions()]
        )

    async def Screenshot(
        self, request: navigator_pb2.ScreenshotRequest, context: grpc.aio.ServicerContext
    ) -> navigator_pb2.ScreenshotResponse:
        _require(ROUTE_CALLERS, "take browser screenshots")
        navigator = self.browsers.open_navigator(request.session_id)
        if navigator is None:
            raise NotFound(TAB_GONE.format(session_id=request.session_id))
        return navigator_pb2.ScreenshotResponse(png=await navigator.screenshot(request.session_id))

    async def Interact(
        self, request: navigator_pb2.InteractRequest, context: grpc.aio.ServicerContext
    ) -> navigator_pb2.InteractResponse:
        _require(ROUTE_CALLERS, "forward input to browser sessions")
        which = request.WhichOneof("input")
        user_input = UserInput(
            click=(request.click.x, request.click.y) if which == "click" else None,
            text=request.text if which == "text" else None,
            key=request.key if which == "key" else None,
        )
        navigator = self.browsers.open_navigator(request.session_id)
        if navigator is None:
            raise NotFound(TAB_GONE.format(session_id=request.session_id))
        await navigator.interact(request.session_id, user_input)
        return navigator_pb2.InteractResponse()

    async def SetTakeover(
        self, request: navigator_pb2.SetTakeoverRequest, context: grpc.aio.ServicerContext
    ) -> navigator_pb2.SetTakeoverResponse:
        _require(ROUTE_CALLERS, "take over browser sessions")
        await self.navigator.set_takeover(request.session_id, request.held)
        return navigator_pb2.SetTakeoverResponse(session=self._session(request.session_id))
