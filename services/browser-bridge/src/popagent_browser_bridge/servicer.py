"""BrowserBridgeService: proto <-> repository only."""

from __future__ import annotations

import grpc

from popagent.browser_bridge.v1 import browser_bridge_pb2, browser_bridge_pb2_grpc
from popagent_browser_bridge.repo import BrowserSettings, BrowserSettingsRepo


def _message(settings: BrowserSettings) -> browser_bridge_pb2.BrowserSettings:
    return browser_bridge_pb2.BrowserSettings(enabled=settings.enabled, updated_at=settings.updated_at.isoformat())


class BrowserBridgeServicer(browser_bridge_pb2_grpc.BrowserBridgeServiceServicer):
    def __init__(self, settings: BrowserSettingsRepo) -> None:
        self.settings = settings
        # Browser sessions opened through BifrOSt, by chat session id. Filled once the
        # BifrOSt client lands; CloseSession answers truthfully about what it closed.
        self.open_sessions: set[str] = set()

    async def GetBrowserSettings(
        self, request: browser_bridge_pb2.GetBrowserSettingsRequest, context: grpc.aio.ServicerContext
    ) -> browser_bridge_pb2.BrowserSettings:
        return _message(await self.settings.get())

    async def UpdateBrowserSettings(
        self, request: browser_bridge_pb2.UpdateBrowserSettingsRequest, context: grpc.aio.ServicerContext
    ) -> browser_bridge_pb2.BrowserSettings:
        # Every tool call reads this row, so a change applies to the very next browser use.
        if request.HasField("enabled"):
            return _message(await self.settings.set_enabled(request.enabled))
        return _message(await self.settings.get())

    async def CloseSession(
        self, request: browser_bridge_pb2.CloseSessionRequest, context: grpc.aio.ServicerContext
    ) -> browser_bridge_pb2.CloseSessionResponse:
        closed = request.session_id in self.open_sessions
        self.open_sessions.discard(request.session_id)
        return browser_bridge_pb2.CloseSessionResponse(closed=closed)
