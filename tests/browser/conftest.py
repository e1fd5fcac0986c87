"""Fixtures of the browser tests: one real browser server (`@playwright/mcp` + chromium) behind a
0600 Unix socket and the HTTPS test site, for the whole suite, and a stack whose browser-bridge
connects to that socket (support/browser_peer.py, support/stacks.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from chat.helpers import supervisor_asks_nothing

from browser.helpers import BASE, BROWSER_STACK, CookieSite
from support.browser_peer import BrowserPeer, LoginSite, browser_peer
from support.stacks import Stack, StackSpec


@pytest.fixture(scope="session")
async def site() -> AsyncIterator[LoginSite]:
    async with LoginSite() as running:
        yield running


@pytest.fixture(scope="session")
async def cookie_site() -> AsyncIterator[CookieSite]:
    async with CookieSite() as running:
        yield running


@pytest.fixture(scope="session")
async def peer() -> AsyncIterator[BrowserPeer]:
    async with browser_peer(BASE) as running:
        yield running


@pytest.fixture
async def stack(peer: BrowserPeer, started_stack: Callable[[StackSpec], Awaitable[Stack]]) -> Stack:
    browser_stack = await started_stack(BROWSER_STACK)
    browser_stack.reset()
    # Seeded disabled; every test starts with the browser on (a test that turns it off restores nothing).
    async with browser_stack.client() as client:
        (await client.patch("/api/settings/browser", json={"enabled": True})).raise_for_status()
        await supervisor_asks_nothing(client)
    return browser_stack
