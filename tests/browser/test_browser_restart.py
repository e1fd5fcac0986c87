"""What survives a browser-bridge restart: a user's takeover always (it is stored); a session's
tabs when the browser itself survives the bridge's MCP session, as a desktop BifrOSt's does
(here `@playwright/mcp` with one shared browser context, kept open by another client), because
their owners are stored on the pages in the browser server."""

from __future__ import annotations

import contextlib
import tempfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from browser.helpers import Bridge, tabs_of
from popagent.browser_bridge.v1 import navigator_pb2, navigator_pb2_grpc
from popagent_browser_bridge.service import build as build_browser_bridge
from popagent_browser_bridge.settings import Settings as BrowserBridgeSettings
from popagent_core.grpc_client import open_channel
from popagent_dev.embedded import free_port
from support.browser_peer import SOCKET_HOST, BrowserPeer, LoginSite
from support.stacks import Stack
from support.waiting import eventually

# One browser server (node + chromium, ~0.5 GB) for the whole browser suite: keep it on one worker.
pytestmark = pytest.mark.xdist_group("browser")


@contextlib.asynccontextmanager
async def _desktop_client(peer: BrowserPeer) -> AsyncIterator[None]:
    """Another MCP client of the same browser (the user's own BifrOSt window, say): while it is
    connected, the shared browser stays open when the bridge's session ends."""
    async with (
        httpx2.AsyncClient(transport=httpx2.AsyncHTTPTransport(uds=str(peer.socket_path)), timeout=60) as http,
        streamable_http_client(f"http://{SOCKET_HOST}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        # A client's browser is opened at its first call, not at its connection.
        await session.call_tool("browser_tabs", {"action": "list"})
        yield


@contextlib.asynccontextmanager
async def _bridge_process(
    settings: dict[str, Any], stack: Stack, session: str, other: str
) -> AsyncIterator[tuple[Bridge, Bridge, Any]]:
    """A browser-bridge (all its state in memory is new), its navigator as agent-runner calls it
    for two chat sessions, and as the gateway calls it."""
    async with (
        build_browser_bridge(BrowserBridgeSettings(**settings)),
        open_channel(settings["POPAGENT_BROWSER_BRIDGE_ADDR"], stack.tokens["agent-runner"]) as runner,
        open_channel(settings["POPAGENT_BROWSER_BRIDGE_ADDR"], stack.tokens["gateway"]) as gateway,
    ):
        stub = navigator_pb2_grpc.BrowserNavigatorServiceStub(runner)
        yield (
            Bridge(stub, session),
            Bridge(stub, other),
            navigator_pb2_grpc.BrowserNavigatorServiceStub(gateway),
        )


async def test_a_takeover_and_the_sessions_tabs_survive_a_bridge_restart(stack: Stack, site: LoginSite) -> None:
    base = Path(tempfile.mkdtemp(prefix="pa-restart-"))
    session, other = f"restart-a-{uuid.uuid4().hex[:6]}", f"restart-b-{uuid.uuid4().hex[:6]}"
    first, second = site.url("/login?restart=first"), site.url("/login?restart=second")
    async with (
        BrowserPeer(base / "b.sock", base / "peer", shared_context=True, isolated=False) as peer,
        _desktop_client(peer),
    ):
        settings: dict[str, Any] = {
            "DATABASE_URL": stack.dsn,
            "NATS_URL": stack.nats_url,
            "POPAGENT_INTERNAL_CALLERS": stack.runner_env["POPAGENT_INTERNAL_CALLERS"],
            "POPAGENT_INTERNAL_TOKEN": stack.tokens["browser-bridge"],
            "POPAGENT_SECRETS_ADDR": stack.gateway_env["POPAGENT_SECRETS_ADDR"],
            "POPAGENT_BROWSER_SOCKET": str(peer.socket_path),
            "POPAGENT_BROWSER_BRIDGE_ADDR": f"127.0.0.1:{free_port()}",
        }
        async with _bridge_process(settings, stack, session, other) as (a, _, routes):
            await a.op("browser_navigate", url=first)
            await a.op("browser_tabs", action="new", url=second)
            await routes.SetTakeover(navigator_pb2.SetTakeoverRequest(session_id=session, held=True))

        # A new bridge: a new MCP session of the same browser.
        async with _bridge_process(settings, stack, session, other) as (a, b, routes):

            async def connected() -> bool:
                return (await routes.GetHealth(navigator_pb2.GetHealthRequest())).reachable

            await eventually(connected, what="the restarted bridge's MCP session")
            listed = await routes.ListSessions(navigator_pb2.ListSessionsRequest())
            assert navigator_pb2.BrowserSession(session_id=session, taken_over=True) in listed.sessions
            with pytest.raises(grpc.aio.AioRpcError) as paused:
                await a.op("browser_snapshot")
            assert "the user has taken over this browser session" in (paused.value.details() or "")
            await routes.SetTakeover(navigator_pb2.SetTakeoverRequest(session_id=session, held=False))

            assert [url for _, _, url in await tabs_of(a)] == [first, second]
            assert first not in await b.text("browser_tabs", action="list")
            await a.op("browser_tabs", action="select", index=1)
            assert f"Page URL: {second}" in await a.text("browser_snapshot")
