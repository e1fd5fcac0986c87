"""What the MCP server tests share: a connected official MCP client, and a tool's JSON answer."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx2
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, TextContent

from support.stacks import Stack

# The two eras the SDK speaks: the initialize handshake's newest revision, and the newest revision,
# whose requests each carry their own envelope (found with server/discover).
HANDSHAKE = "2025-11-25"
MODERN = "2026-07-28"


@contextlib.asynccontextmanager
async def connected(stack: Stack, headers: dict[str, str], revision: str) -> AsyncIterator[ClientSession]:
    """An MCP client session on the stack's /mcp at `revision`, sending `headers` on every request."""
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=60.0)) as http,
        streamable_http_client(f"{stack.url}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        if revision == MODERN:
            await session.discover()
        else:
            await session.initialize()
        assert session.protocol_version == revision
        yield session


def text_of(result: CallToolResult) -> str:
    [content] = result.content
    assert isinstance(content, TextContent), content
    return content.text


def answer_of(result: CallToolResult) -> Any:
    """A successful tool call's JSON answer."""
    assert not result.is_error, text_of(result)
    return json.loads(text_of(result))
