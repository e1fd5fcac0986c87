"""The browser group: `bifrostNavigator` and `useBrowserSecret`, through browser-bridge.

An agent gets them when its membership names them, its persisted browser access is not `none`,
and browser settings enable the browser as this turn read them (`TurnBrowser`). Access itself is
enforced by browser-bridge on every call, from the persisted access this runner sends.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import grpc

from popagent.browser_bridge.v1 import browser_bridge_pb2, browser_bridge_pb2_grpc, navigator_pb2_grpc

logger = logging.getLogger(__name__)

BROWSER_TOOLS = frozenset({"bifrostNavigator", "useBrowserSecret"})
SETTINGS_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class TurnBrowser:
    """The browser as one turn sees it: enabled or not, read once at the turn's start."""

    navigator: navigator_pb2_grpc.BrowserNavigatorServiceStub
    enabled: bool


@dataclass(frozen=True)
class BrowserAccessPoint:
    settings: browser_bridge_pb2_grpc.BrowserBridgeServiceStub
    navigator: navigator_pb2_grpc.BrowserNavigatorServiceStub

    async def for_turn(self) -> TurnBrowser:
        try:
            settings = await self.settings.GetBrowserSettings(
                browser_bridge_pb2.GetBrowserSettingsRequest(), timeout=SETTINGS_TIMEOUT_S
            )
        except grpc.aio.AioRpcError as exc:
            logger.warning("browser tools withheld: browser settings unreadable", extra={"code": exc.code().name})
            return TurnBrowser(self.navigator, enabled=False)
        return TurnBrowser(self.navigator, enabled=settings.enabled)
