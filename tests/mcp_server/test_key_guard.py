"""The gateway's key middleware on its own: it refuses /mcp without the key before anything behind it
runs (the /mcp endpoint's own check is a second line, which the stack tests cannot tell apart), and
takes `Authorization: Bearer` on /mcp only, leaving the /api contract as it was."""

from __future__ import annotations

import httpx
import pytest
from starlette.types import Receive, Scope, Send

from popagent_gateway.bounded import ApiKeyMiddleware

KEY = "guard-test-key-" + "g" * 16


async def reached(scope: Scope, receive: Receive, send: Send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"reached"})


async def status(path: str, headers: dict[str, str]) -> int:
    transport = httpx.ASGITransport(app=ApiKeyMiddleware(reached, api_key=KEY))
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
        return (await client.post(path, headers=headers)).status_code


@pytest.mark.parametrize("path", ["/mcp", "/mcp/", "/api/agents"])
@pytest.mark.parametrize(
    "headers",
    [{}, {"x-popagent-key": KEY[:-1]}, {"authorization": f"Bearer {KEY[:-1]}"}, {"authorization": KEY}],
    ids=["none", "wrong-header", "wrong-bearer", "no-scheme"],
)
async def test_a_missing_or_wrong_key_never_reaches_the_app(path: str, headers: dict[str, str]) -> None:
    assert await status(path, headers) == 401


async def test_the_key_admits_as_its_header_everywhere_and_as_a_bearer_token_on_mcp_only() -> None:
    assert await status("/mcp", {"x-popagent-key": KEY}) == 200
    assert await status("/mcp", {"authorization": f"Bearer {KEY}"}) == 200
    assert await status("/mcp", {"authorization": f"bearer {KEY}"}) == 200
    assert await status("/api/agents", {"x-popagent-key": KEY}) == 200
    assert await status("/api/agents", {"authorization": f"Bearer {KEY}"}) == 401
    # Neither a path that only starts like /mcp, nor the rest of the site, is guarded.
    assert await status("/mcpx", {}) == 200
