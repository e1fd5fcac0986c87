"""Wiring of the browser-bridge service."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from popagent.browser_bridge.v1 import browser_bridge_pb2_grpc
from popagent_browser_bridge.repo import BrowserSettingsRepo
from popagent_browser_bridge.servicer import BrowserBridgeServicer
from popagent_browser_bridge.settings import Settings
from popagent_core.service import service_kernel

MIGRATIONS = Path(__file__).parent / "migrations"


@contextlib.asynccontextmanager
async def build(settings: Settings) -> AsyncIterator[None]:
    async with service_kernel("browser-bridge", settings, MIGRATIONS) as kernel:
        browser_bridge_pb2_grpc.add_BrowserBridgeServiceServicer_to_server(
            BrowserBridgeServicer(BrowserSettingsRepo(kernel.pool)), kernel.server
        )
        async with kernel.serving(settings.grpc_address):
            yield
