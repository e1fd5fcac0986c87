"""The routes of /mcp, /a2a and the agent card, whose SDKs load on the first request for them.

The MCP and A2A server SDKs are a fifth of an idle gateway's memory (bench/startup.py: 160 MB
with them loaded at start, 127 without), and most installations never call them. The routes
exist from the start, and the key is checked before anything loads; the first request that
needs an endpoint imports its module (mcp_server.py, a2a_agent.py) and builds it, once per
process.
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import TYPE_CHECKING

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from popagent_gateway.bounded import A2A_PATH, AGENT_CARD_PATH, MCP_PATH, key_admitted, send_json
from popagent_gateway.deps import UNAUTHENTICATED_MESSAGE
from popagent_gateway.settings import Settings

if TYPE_CHECKING:
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

    from popagent_gateway.a2a_agent import A2aEndpoints


class McpRoute:
    """The ASGI app at /mcp: the key, then the SDK's streamable HTTP transport, started on first use."""

    def __init__(self, api_key: str) -> None:
        self.api_key = api_key
        self._manager: StreamableHTTPSessionManager | None = None
        self._loading = asyncio.Lock()
        self._stop = asyncio.Event()
        self._running: asyncio.Task[None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not key_admitted(self.api_key, scope):
            await send_json(send, 401, {"error": UNAUTHENTICATED_MESSAGE})
            return
        manager = await self._started()
        await manager.handle_request(scope, receive, send)

    async def _started(self) -> StreamableHTTPSessionManager:
        async with self._loading:
            if self._manager is None:
                from popagent_gateway.mcp_server import session_manager

                manager = session_manager()
                ready = asyncio.Event()
                # The transport's task group is entered and left in one task of its own, which
                # carries no request's context (trace, caller) into the requests it runs.
                self._running = asyncio.create_task(
                    self._run(manager, ready), name="mcp-transport", context=contextvars.Context()
                )
                ready_or_failed = asyncio.create_task(ready.wait())
                await asyncio.wait([ready_or_failed, self._running], return_when=asyncio.FIRST_COMPLETED)
                ready_or_failed.cancel()
                if self._running.done():
                    self._running.result()  # raises what stopped it
                self._manager = manager
            return self._manager

    async def _run(self, manager: StreamableHTTPSessionManager, ready: asyncio.Event) -> None:
        async with manager.run():
            ready.set()
            await self._stop.wait()

    async def aclose(self) -> None:
        """Ends the requests in flight and the transport, when it was started."""
        self._stop.set()
        if self._running is not None:
            await self._running


class A2aRoutes:
    """/a2a (the key, then the SDK's JSON-RPC endpoint) and the public agent card, built on first use."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._endpoints: A2aEndpoints | None = None

    def _built(self) -> A2aEndpoints:
        # Synchronous: no await between the check and the assignment, so one build per process.
        if self._endpoints is None:
            from popagent_gateway.a2a_agent import a2a_endpoints

            self._endpoints = a2a_endpoints(self.settings)
        return self._endpoints

    async def answer(self, request: Request) -> Response:
        # The key again, as /api's dependency and /mcp's route check it: `ApiKeyMiddleware` first.
        if not key_admitted(self.settings.api_key, request.scope):
            return JSONResponse({"error": UNAUTHENTICATED_MESSAGE}, status_code=401)
        return await self._built().answer(request)

    async def card(self, request: Request) -> Response:
        return await self._built().card(request)

    async def aclose(self) -> None:
        if self._endpoints is not None:
            await self._endpoints.handler.aclose()


def mount_interop(app: FastAPI, settings: Settings) -> tuple[McpRoute, A2aRoutes]:
    """Route /mcp, /a2a and the agent card; both returned must be closed (`aclose()`) when the app stops.

    Plain routes, not mounts: /mcp itself answers (a mount redirects it to /mcp/), and they stay out
    of the OpenAPI document, which describes /api.
    """
    mcp = McpRoute(settings.api_key)
    a2a = A2aRoutes(settings)
    app.router.routes.append(Route(MCP_PATH, mcp, methods=["GET", "POST", "DELETE"]))
    app.router.routes.append(Route(A2A_PATH, a2a.answer, methods=["POST"], name="a2a"))
    app.router.routes.append(Route(AGENT_CARD_PATH, a2a.card, methods=["GET"]))
    return mcp, a2a
