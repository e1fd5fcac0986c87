"""A user's MCP server over streamable HTTP, written with the `mcp` SDK, run as its own process by the
tests (`harness.serving_peer`) so a test can kill it mid-call and start it again on the same port.

    python peer.py <port> [<bearer token>]

Tools: `echo` (text), `picture` (text, a PNG image and a text resource), `slow` (sleeps), `grow`
(adds the tool `extra` and sends notifications/tools/list_changed). With a token, a request without
`Authorization: Bearer <token>` is answered 401.
"""

from __future__ import annotations

import asyncio
import base64
import sys

import mcp_types as types
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import ASGIApp, Receive, Scope, Send

# A 1x1 transparent PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


def server() -> MCPServer:
    peer = MCPServer("peer-server")

    def echo(text: str) -> str:
        """Echo the text back, prefixed."""
        return f"echo: {text}"

    def picture() -> list[types.ContentBlock]:
        """A caption, a picture and a note."""
        return [
            types.TextContent(type="text", text="a tiny picture"),
            types.ImageContent(type="image", data=base64.b64encode(PNG).decode(), mime_type="image/png"),
            types.EmbeddedResource(
                type="resource",
                resource=types.TextResourceContents(uri="memo://note", mime_type="text/plain", text="the note"),
            ),
        ]

    async def slow(seconds: float) -> str:
        """Sleep, then answer."""
        await asyncio.sleep(seconds)
        return "slept"

    def extra() -> str:
        """The tool `grow` adds."""
        return "extra"

    async def grow(ctx: Context) -> str:
        """Register `extra` and tell the client the tool list changed."""
        peer.add_tool(extra, name="extra")
        await ctx.request_context.session.send_tool_list_changed()
        return "grown"

    for tool in (echo, picture, slow, grow):
        peer.add_tool(tool, name=tool.__name__)
    return peer


class BearerOnly:
    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != self.expected:
            await send({"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"unauthorized"})
            return
        await self.app(scope, receive, send)


def main() -> None:
    port = int(sys.argv[1])
    token = sys.argv[2] if len(sys.argv) > 2 else ""
    app: ASGIApp = server().streamable_http_app(
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False)
    )
    if token:
        app = BearerOnly(app, token)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")


if __name__ == "__main__":
    main()
