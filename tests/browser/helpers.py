"""Helpers of the browser tests: the bridge's navigator over gRPC as agent-runner calls it, and
the canary secret bound to the test site's login origin."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import re
import tempfile
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson

from popagent.browser_bridge.v1 import navigator_pb2, navigator_pb2_grpc
from popagent_core.grpc_client import open_channel
from popagent_dev.embedded import free_port
from support.browser_peer import LoginSite
from support.canary import CANARY
from support.stacks import CHAT_HOOK_PATHS, Stack, StackSpec

# Short: a Unix socket path must fit in 108 bytes.
BASE = Path(tempfile.mkdtemp(prefix="pa-browser-"))
SOCKET = BASE / "bifrost.sock"
HOOK_PATHS = {**CHAT_HOOK_PATHS, "PreToolUse": ("/pre-tool", ["bifrostNavigator", "useBrowserSecret"])}
BROWSER_STACK = StackSpec(
    "browser",
    HOOK_PATHS,
    frozenset({"secrets", "browser-bridge", "tasks", "gateway"}),
    bridge_env={"POPAGENT_BROWSER_SOCKET": str(SOCKET), "POPAGENT_BROWSER_CONNECT_WAIT_S": "3"},
)
USER_RESOURCE = "popagent-user"
SECRET_NAME = "site-password"


def ref_of(snapshot: str, label: str) -> str:
    match = re.search(rf'(?:textbox|button) "{label}" \[ref=((?:f\d+)?e\d+)\]', snapshot)
    assert match, snapshot
    return match.group(1)


class Bridge:
    """BrowserNavigatorService as agent-runner reaches it (its own internal credential)."""

    def __init__(self, stub: navigator_pb2_grpc.BrowserNavigatorServiceStub, session_id: str) -> None:
        self.stub = stub
        self.session_id = session_id

    async def op(self, operation: str, access: str = "interactive", **arguments: Any) -> navigator_pb2.NavigateResponse:
        return await self.stub.Navigate(
            navigator_pb2.NavigateRequest(
                session_id=self.session_id,
                agent_id="popagent",
                browser_access=access,
                operation=operation,
                arguments_json=json.dumps(arguments),
            ),
            timeout=60,
        )

    async def text(self, operation: str, **arguments: Any) -> str:
        answer = await self.op(operation, **arguments)
        return "\n".join(part.text for part in answer.content)

    async def use_secret(self, element: str, name: str = SECRET_NAME) -> navigator_pb2.UseSecretResponse:
        return await self.stub.UseSecret(
            navigator_pb2.UseSecretRequest(
                session_id=self.session_id,
                agent_id="popagent",
                browser_access="interactive",
                resource_id=USER_RESOURCE,
                name=name,
                element=element,
            ),
            timeout=60,
        )


@contextlib.asynccontextmanager
async def bridge(stack: Stack, session_id: str, caller: str = "agent-runner") -> AsyncIterator[Bridge]:
    address = stack.runner_env["POPAGENT_BROWSER_BRIDGE_ADDR"]
    async with open_channel(address, stack.tokens[caller]) as channel:
        yield Bridge(navigator_pb2_grpc.BrowserNavigatorServiceStub(channel), session_id)


async def bind_canary(stack: Stack, site: LoginSite) -> str:
    """The canary, stored as the user's `site-password` and bound to the login origin."""
    origin = site.url("").rstrip("/")
    async with stack.client() as client:
        body = {"resourceId": USER_RESOURCE, "name": SECRET_NAME, "value": CANARY}
        (await client.post("/api/secrets", json=body)).raise_for_status()
        bound = await client.post(f"/api/secrets/{USER_RESOURCE}/{SECRET_NAME}/origins", json={"origin": origin})
        assert bound.status_code in (200, 409), bound.text
    return origin


async def everything_stored(stack: Stack) -> bytes:
    """Every row of every table of the stack's services, as text (the canary must be in none)."""
    dump = []
    async with stack.db() as conn:
        for schema in ("agent_runner", "hooks", "browser_bridge"):
            tables = await conn.fetch(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = $1", schema
            )
            for table in tables:
                rows = await conn.fetch(f'SELECT t::text AS row FROM "{schema}"."{table["table_name"]}" t')
                dump.extend(row["row"] for row in rows)
    return orjson.dumps(dump)


# A line of the server's tab list: `- 0: (current) [title](url)`.
TAB = re.compile(r"^- (\d+):( \(current\))? \[[^\]]*\]\((\S+)\)", re.MULTILINE)


async def tabs_of(b: Bridge) -> list[tuple[int, bool, str]]:
    """The session's tab list as the model sees it: (index, current, url)."""
    text = await b.text("browser_tabs", action="list")
    return [(int(i), bool(current), url) for i, current, url in TAB.findall(text)]


@dataclasses.dataclass
class CookieSite:
    """A plain HTTP server on one loopback port, reached under any host name (chromium maps every
    name to 127.0.0.1), so `allowed.test`, `blocked.test` and `other.test` are three origins:
    `/set?v=X` sets the cookie `pa=X`, `/show` shows the cookies it was sent, `/redirect?to=URL`
    answers 302 to URL, `/page` is a page with a link, `/store?v=X` puts `pa=X` in the origin's local
    storage and `/stored` shows what its local storage holds under `pa`. Every request's Host is noted."""

    port: int = dataclasses.field(default_factory=free_port)
    hosts: list[str] = dataclasses.field(default_factory=list[str])
    _server: asyncio.Server | None = None

    def url(self, host: str, path: str) -> str:
        return f"http://{host}:{self.port}{path}"

    def origin(self, host: str) -> str:
        return f"http://{host}:{self.port}"

    async def __aenter__(self) -> CookieSite:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)).decode("latin-1")
            lines = head.split("\r\n")
            target = lines[0].split(" ")[1]
            headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
            self.hosts.append(headers.get("host", "").split(":")[0])
            path, _, query = target.partition("?")
            params = dict(urllib.parse.parse_qsl(query))
            extra: list[str] = []
            status = "200 OK"
            if path == "/set":
                extra.append(f"Set-Cookie: pa={params.get('v', '')}; Path=/; Max-Age=3600")
                body = f"<title>Set</title><p>set {params.get('v', '')}</p>"
            elif path == "/show":
                body = f"<title>Show</title><p>cookies: [{headers.get('cookie', '')}]</p>"
            elif path == "/redirect":
                status = "302 Found"
                extra.append(f"Location: {params.get('to', '/page')}")
                body = ""
            elif path == "/store":
                value = json.dumps(params.get("v", ""))
                body = f"<title>Store</title><script>localStorage.setItem('pa', {value})</script><p>stored</p>"
            elif path == "/stored":
                shown = "(localStorage.getItem('pa') ?? '')"
                body = (
                    f"<title>Stored</title><script>document.write('<p>local storage: [' + {shown} + ']</p>')</script>"
                )
            elif path == "/page":
                body = '<title>Page</title><p>hello</p><a href="/show">Show cookies</a>'
            else:
                status, body = "404 Not Found", "<p>not found</p>"
            payload = body.encode()
            response = [f"HTTP/1.1 {status}", "Content-Type: text/html", "Connection: close", *extra]
            response.append(f"Content-Length: {len(payload)}")
            writer.write(("\r\n".join(response) + "\r\n\r\n").encode() + payload)
            await writer.drain()
        except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError, IndexError):
            pass
        finally:
            writer.close()
