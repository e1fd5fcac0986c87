"""The gateway's key middleware on its own: it refuses /mcp without the key before anything behind it
runs (the /mcp endpoint's own check is a second line, which the stack tests cannot tell apart), and
takes `Authorization: Bearer` on /mcp only, leaving the /api contract as it was."""

from __future__ import annotations

import pytest
from gateway.harness import key_guard_status

KEY = "guard-test-key-" + "g" * 16


@pytest.mark.parametrize("path", ["/mcp", "/mcp/", "/api/agents"])
@pytest.mark.parametrize(
    "headers",
    [{}, {"x-popagent-key": KEY[:-1]}, {"authorization": f"Bearer {KEY[:-1]}"}, {"authorization": KEY}],
    ids=["none", "wrong-header", "wrong-bearer", "no-scheme"],
)
async def test_a_missing_or_wrong_key_never_reaches_the_app(path: str, headers: dict[str, str]) -> None:
    assert await key_guard_status(KEY, path, headers) == 401


async def test_the_key_admits_as_its_header_everywhere_and_as_a_bearer_token_on_mcp_only() -> None:
    assert await key_guard_status(KEY, "/mcp", {"x-popagent-key": KEY}) == 200
    assert await key_guard_status(KEY, "/mcp", {"authorization": f"Bearer {KEY}"}) == 200
    assert await key_guard_status(KEY, "/mcp", {"authorization": f"bearer {KEY}"}) == 200
    assert await key_guard_status(KEY, "/api/agents", {"x-popagent-key": KEY}) == 200
    assert await key_guard_status(KEY, "/api/agents", {"authorization": f"Bearer {KEY}"}) == 401
    # Neither a path that only starts like /mcp, nor the rest of the site, is guarded.
    assert await key_guard_status(KEY, "/mcpx", {}) == 200
