"""BrowserBridgeService: proto <-> repository only."""

from __future__ import annotations

import asyncpg
import grpc

from popagent.browser_bridge.v1 import browser_bridge_pb2, browser_bridge_pb2_grpc
from popagent_core.db import wrap_db_errors
from popagent_core.errors import ConfigurationError


def _settings(row: asyncpg.Record | None) -> browser_bridge_pb2.BrowserSettings:
    if row is None:
        raise ConfigurationError("browser settings row is missing")
    return browser_bridge_pb2.BrowserSettings(enabled=row["enabled"], updated_at=row["updated_at"].isoformat())


class BrowserBridgeServicer(browser_bridge_pb2_grpc.BrowserBridgeServiceServicer):
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        # Browser sessions opened through BifrOSt, by chat session id. Filled once the
        # BifrOSt client lands; CloseSession answers truthfully about what it closed.
        self.open_sessions: set[str] = set()

    async def GetBrowserSettings(
        self, request: browser_bridge_pb2.GetBrowserSettingsRequest, context: grpc.aio.ServicerContext
    ) -> browser_bridge_pb2.BrowserSettings:
        with wrap_db_errors():
            row = await self.pool.fetchrow("SELECT enabled, updated_at FROM popagent_browser_settings WHERE id = 1")
        return _settings(row)

    async def UpdateBrowserSettings(
        self, request: browser_bridge_pb2.UpdateBrowserSettingsRequest, context: grpc.aio.ServicerContext
    ) -> browser_bridge_pb2.BrowserSettings:
        # Every tool call reads this row, so a change applies to the very next browser use.
        with wrap_db_errors():
            if request.HasField("enabled"):
                row = await self.pool.fetchrow(
                    "UPDATE popagent_browser_settings SET enabled = $1, updated_at = now() WHERE id = 1"
                    " RETURNING enabled, updated_at",
                    request.enabled,
                )
            else:
                row = await self.pool.fetchrow("SELECT enabled, updated_at FROM popagent_browser_settings WHERE id = 1")
        return _settings(row)

    async def CloseSession(
        self, request: browser_bridge_pb2.CloseSessionRequest, context: grpc.aio.ServicerContext
    ) -> browser_bridge_pb2.CloseSessionResponse:
        closed = request.session_id in self.open_sessions
        self.open_sessions.discard(request.session_id)
        return browser_bridge_pb2.CloseSessionResponse(closed=closed)
