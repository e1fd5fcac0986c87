"""The browser-bridge access point of the browser tools (`tools/browser/`), and each turn's view of it.

An agent gets the browser tools when its membership names them, its persisted browser access is not `none`,
and browser settings enable the browser as this turn read them (`TurnBrowser`). Access itself is
enforced by browser-bridge on every call, from the persisted access this runner sends.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from nats.aio.client import Client as NatsClient

from popagent.browser_bridge.v1 import browser_bridge_pb2, browser_bridge_pb2_grpc, navigator_pb2_grpc
from popagent_core import subjects
from popagent_core.errors import PopagentError
from popagent_core.grpc_client import map_rpc_errors

logger = logging.getLogger(__name__)

BROWSER_TOOLS = frozenset({"bifrostNavigator", "useBrowserSecret"})
SETTINGS_TIMEOUT_S = 2.0
# A cached copy older than this is read again even without an announced change.
MAX_AGE_S = 60.0
# After a failed read, turns go without browser tools this long before the settings are asked for again.
RETRY_AFTER_S = 5.0


@dataclass(frozen=True)
class TurnBrowser:
    """The browser as one turn sees it: enabled or not, read once at the turn's start."""

    navigator: navigator_pb2_grpc.BrowserNavigatorServiceStub
    enabled: bool


@dataclass
class BrowserAccessPoint:
    """The browser settings as turns read them: one cached copy, dropped when browser-bridge announces
    a change (`invalidate`, on `popagent.browser_bridge.settings.changed`, which it flushes before
    answering the update) and older than MAX_AGE_S read again (an announcement lost with NATS); an
    unreadable copy counts as disabled for RETRY_AFTER_S."""

    settings: browser_bridge_pb2_grpc.BrowserBridgeServiceStub
    navigator: navigator_pb2_grpc.BrowserNavigatorServiceStub
    _enabled: bool | None = field(default=None, init=False)
    _read_at: float = field(default=0.0, init=False)
    # Bumped by every change: a read that started before one does not keep its answer.
    _generation: int = field(default=0, init=False)

    def invalidate(self) -> None:
        self._enabled = None
        self._generation += 1

    async def for_turn(self) -> TurnBrowser:
        if self._enabled is not None and time.monotonic() - self._read_at < MAX_AGE_S:
            return TurnBrowser(self.navigator, enabled=self._enabled)
        generation = self._generation
        try:
            with map_rpc_errors():
                settings = await self.settings.GetBrowserSettings(
                    browser_bridge_pb2.GetBrowserSettingsRequest(), timeout=SETTINGS_TIMEOUT_S
                )
        except PopagentError as exc:
            logger.warning("browser tools withheld: browser settings unreadable", extra={"code": exc.grpc_code.name})
            if generation == self._generation:
                # Runs go without browser tools a while before asking again (an unreachable bridge
                # would otherwise cost every turn a failed call before its model request).
                self._enabled, self._read_at = False, time.monotonic() - MAX_AGE_S + RETRY_AFTER_S
            return TurnBrowser(self.navigator, enabled=False)
        if generation == self._generation:
            self._enabled, self._read_at = settings.enabled, time.monotonic()
        return TurnBrowser(self.navigator, enabled=settings.enabled)


@contextlib.asynccontextmanager
async def invalidated_on_change(access: BrowserAccessPoint, nc: NatsClient) -> AsyncIterator[None]:
    """Drop the cached settings whenever browser-bridge says they changed."""

    async def changed(_msg: object) -> None:
        access.invalidate()

    sub = await nc.subscribe(subjects.BROWSER_SETTINGS_CHANGED, cb=changed)
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
