"""What the MCP server tests share: connected official MCP clients, a tool approval asked for, and a tool's
JSON answer."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx2
from mcp.client.client import Client
from mcp.client.session import ClientSession, ElicitationFnT
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, TextContent

from support.stacks import API_KEY, Stack

# The two eras the SDK speaks: the initialize handshake's newest revision, and the newest revision,
# whose requests each carry their own envelope (found with server/discover).
HANDSHAKE = "2025-11-25"
MODERN = "2026-07-28"
BEARER = {"authorization": f"Bearer {API_KEY}"}


@contextlib.asynccontextmanager
async def connected(
    stack: Stack, headers: dict[str, str], revision: str, elicitation_callback: ElicitationFnT | None = None
) -> AsyncIterator[ClientSession]:
    """An MCP client session on the stack's /mcp at `revision`, sending `headers` on every request
    (declaring the elicitation capability when given its callback)."""
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=60.0)) as http,
        streamable_http_client(f"{stack.url}/mcp", http_client=http) as (read, write),
        ClientSession(read, write, elicitation_callback=elicitation_callback) as session,
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


@contextlib.asynccontextmanager
async def asking_before(stack: Stack, tool: str) -> AsyncIterator[None]:
    """The supervisor asks a person before each call of `tool` while inside; its policy is put back after."""
    async with stack.client() as client:
        [supervisor] = [a for a in (await client.get("/api/agents")).json()["agents"] if a["id"] == "popagent"]
        # As a rule is written (a rule's absent field answers null).
        policy = [
            {key: value for key, value in rule.items() if value is not None} for rule in supervisor["toolApproval"]
        ]
        asked = await client.patch("/api/agents/popagent", json={"toolApproval": [{"tool": tool, "decision": "ask"}]})
        assert asked.status_code == 200, asked.text
        try:
            yield
        finally:
            restored = await client.patch("/api/agents/popagent", json={"toolApproval": policy})
            assert restored.status_code == 200, restored.text


@contextlib.asynccontextmanager
async def asking_client(stack: Stack, elicitation_callback: ElicitationFnT) -> AsyncIterator[Client]:
    """The SDK's high-level client at 2026-07-28 with the key, declaring elicitation: it answers a tool's
    questions (InputRequiredResult) with `elicitation_callback` and calls the tool again, as the SDK does."""
    async with (
        httpx2.AsyncClient(headers=BEARER, timeout=httpx2.Timeout(30.0, read=60.0)) as http,
        Client(
            streamable_http_client(f"{stack.url}/mcp", http_client=http),
            mode=MODERN,
            elicitation_callback=elicitation_callback,
        ) as client,
    ):
        yield client
