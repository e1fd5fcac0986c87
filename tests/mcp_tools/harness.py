"""What the MCP tool tests share: the peer HTTP MCP servers (`peer.py`, and `oauth_peer.py` behind
OAuth) as processes of their own, the stdio server's source, servers added through /api/mcp-servers
for the length of a block, and an OAuth authorization followed as a browser would."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

from popagent_dev.embedded import free_port
from support.waiting import eventually

PEER = Path(__file__).with_name("peer.py")
OAUTH_PEER = Path(__file__).with_name("oauth_peer.py")

# A stdio MCP server, run in the sandbox as `python -c STDIO_SERVER`: what it can see and reach.
STDIO_SERVER = """
import os, socket
from mcp.server.mcpserver import MCPServer

server = MCPServer("sandboxed")

def environment() -> str:
    \"\"\"The variables this server runs with, and DATABASE_URL's value.\"\"\"
    return "names=" + ",".join(sorted(os.environ)) + " database_url=" + repr(os.environ.get("DATABASE_URL"))

def reach(host: str, port: int) -> str:
    \"\"\"Try to open a TCP connection.\"\"\"
    try:
        socket.create_connection((host, port), timeout=3).close()
    except OSError as exc:
        return f"unreachable: {exc}"
    return "connected"

server.add_tool(environment, name="environment")
server.add_tool(reach, name="reach")
server.run()
"""


class Peer:
    """The peer server process on a fixed port: started, killed and started again."""

    def __init__(self, token: str = "", script: Path = PEER) -> None:
        self.port = free_port()
        self.token = token
        self.script = script
        self.process: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    async def start(self) -> None:
        argv = [sys.executable, str(self.script), str(self.port), *([self.token] if self.token else [])]
        self.process = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
        )

        async def listening() -> bool:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                return True
            return False

        await eventually(listening, within=30, what="the peer MCP server to listen")

    async def kill(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.kill()
            await self.process.wait()


@contextlib.asynccontextmanager
async def serving_peer(token: str = "") -> AsyncIterator[Peer]:
    peer = Peer(token)
    await peer.start()
    try:
        yield peer
    finally:
        await peer.kill()


class OAuthPeer(Peer):
    """`oauth_peer.py`: its authorization server's test controls and counts."""

    def __init__(self) -> None:
        super().__init__(script=OAUTH_PEER)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def control(self, action: str, **params: Any) -> None:
        async with httpx.AsyncClient() as http:
            response = await http.post(f"{self.base}/test/{action}", params=params)
            response.raise_for_status()

    async def stats(self) -> dict[str, Any]:
        async with httpx.AsyncClient() as http:
            return (await http.get(f"{self.base}/test/stats")).json()

    async def issued(self) -> list[str]:
        """Every token and client secret its authorization server issued."""
        async with httpx.AsyncClient() as http:
            return (await http.get(f"{self.base}/test/issued")).json()


@contextlib.asynccontextmanager
async def serving_oauth_peer() -> AsyncIterator[OAuthPeer]:
    peer = OAuthPeer()
    await peer.start()
    try:
        yield peer
    finally:
        await peer.kill()


async def authorize_in_browser(authorization_url: str) -> httpx.Response:
    """Follow the authorization URL as the user's browser would (the test authorization server
    approves at once) to the gateway's callback, which a browser reaches without the API key."""
    async with httpx.AsyncClient(follow_redirects=False) as browser:
        approved = await browser.get(authorization_url)
        assert approved.status_code in (302, 303, 307), approved.text
        return await browser.get(approved.headers["location"])


@contextlib.asynccontextmanager
async def added_server(client: httpx.AsyncClient, **body: Any) -> AsyncIterator[dict[str, Any]]:
    """A server added through the API (granted to the supervisor unless `agents` says otherwise), deleted after."""
    body.setdefault("agents", {"popagent": {}})
    created = await client.post("/api/mcp-servers", json=body)
    assert created.status_code == 201, created.text
    server = created.json()
    try:
        yield server
    finally:
        deleted = await client.delete(f"/api/mcp-servers/{server['id']}")
        assert deleted.status_code in (204, 404), deleted.text


def tool_results(request: dict[str, Any]) -> list[str]:
    """The tool results a model request carried, as text."""
    return [str(message["content"]) for message in request["messages"] if message["role"] == "tool"]


def offered_tools(request: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in request.get("tools", [])]
