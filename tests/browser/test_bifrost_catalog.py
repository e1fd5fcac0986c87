"""The BifrOSt client's catalog against a real MCP server of the SDK (not the browser): it is read
once per session and read again when the server sends `notifications/tools/list_changed`."""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.transport_security import TransportSecuritySettings

from popagent_browser_bridge.bifrost import BifrostClient
from popagent_core.lifecycle import background_task
from support.waiting import eventually


def _server() -> MCPServer:
    server = MCPServer("catalog-peer")

    def browser_extra() -> str:
        return "extra"

    async def browser_grow(ctx: Context) -> str:
        """Register browser_extra and tell the client its catalog changed."""
        server.add_tool(browser_extra, name="browser_extra")
        await ctx.request_context.session.send_tool_list_changed()
        return "grown"

    server.add_tool(browser_grow, name="browser_grow")
    return server


@contextlib.asynccontextmanager
async def _serving(socket_path: Path) -> AsyncIterator[None]:
    security = TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=["127.0.0.1:8000"])
    app = _server().streamable_http_app(transport_security=security)
    config = uvicorn.Config(app, uds=str(socket_path), log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        await eventually(lambda: server.started, what="the MCP server to start")
        os.chmod(socket_path, 0o600)
        yield
    finally:
        server.should_exit = True
        await task


async def test_the_catalog_is_refreshed_on_tools_list_changed() -> None:
    with tempfile.TemporaryDirectory(prefix="pa-cat-") as folder:
        socket_path = Path(folder) / "mcp.sock"
        async with _serving(socket_path):
            client = BifrostClient(socket_path, "http://127.0.0.1:8000/mcp", call_timeout_s=10, connect_wait_s=5)
            async with background_task(client.run, name="catalog-client"):
                await client.session()
                assert sorted(client.tools) == ["browser_grow"]
                assert client.health().server_name == "catalog-peer"
                result = await client.call("browser_grow", {})
                assert not result.is_error
                await eventually(lambda: "browser_extra" in client.tools, what="the refreshed catalog")
                assert client.health().tool_count == 2


@pytest.mark.parametrize("mode", [0o660, 0o606])
async def test_a_group_or_world_writable_socket_is_never_connected_to(mode: int) -> None:
    with tempfile.TemporaryDirectory(prefix="pa-cat-") as folder:
        socket_path = Path(folder) / "mcp.sock"
        async with _serving(socket_path):
            os.chmod(socket_path, mode)
            client = BifrostClient(socket_path, "http://127.0.0.1:8000/mcp", call_timeout_s=10, connect_wait_s=0.5)
            async with background_task(client.run, name="catalog-client"):
                with pytest.raises(Exception, match=f"mode {mode:04o}"):
                    await client.session()
            assert client.health().reachable is False and client.server_name == ""
