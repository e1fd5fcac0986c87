"""bifrostNavigator's contract: an operation the live catalog does not offer, or arguments outside the
operation's input schema, are refused before the browser is asked (the server drops unknown keys
silently, so a typo would do something other than asked); what the server answers is kept part by
part, MCP resource parts included (uri, MIME type, text), scrubbed of bound secrets like text.

@playwright/mcp (the suite's browser server) answers only text and images, so for resource parts an
MCP server of the SDK takes its place behind the socket for one test, and the real one is back after it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
import uvicorn
from chat.helpers import chat, new_session, of_type
from mcp import types
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings

from browser.helpers import Bridge, bridge
from popagent_browser_bridge.navigator import _outcome
from popagent_browser_bridge.scrub import Scrubber
from support.browser_peer import SOCKET_HOST, BrowserPeer, LoginSite
from support.model_gateway import ToolCall, Turn
from support.stacks import Stack
from support.waiting import eventually

# One browser server (node + chromium, ~0.5 GB) for the whole browser suite: keep it on one worker.
pytestmark = pytest.mark.xdist_group("browser")

NAV = "bifrostNavigator"


async def test_an_unknown_operation_or_arguments_outside_its_schema_are_refused(stack: Stack, site: LoginSite) -> None:
    login = site.url("/login")
    refusals: list[tuple[str, dict[str, Any], str]] = [
        ("browser_fly", {"url": login}, "unknown browser operation 'browser_fly'; the browser offers: "),
        ("browser_navigate", {"url": 42}, "browser_navigate url: 42 is not of type 'string'"),
        ("browser_navigate", {}, "browser_navigate arguments: 'url' is a required property"),
        ("browser_navigate", {"url": login, "newTab": True}, "Additional properties are not allowed ('newTab'"),
    ]
    async with bridge(stack, f"contract-{uuid.uuid4().hex[:8]}") as b:
        for operation, arguments, says in refusals:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await b.op(operation, **arguments)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (operation, arguments)
            assert says in (refused.value.details() or ""), (operation, refused.value.details())
            if operation == "browser_fly":
                # The refusal lists what the live catalog offers.
                assert "browser_navigate" in (refused.value.details() or "")
        # The same operation with arguments inside its schema runs: the refusals were about the call.
        assert "Page URL: https://login.test" in await b.text("browser_navigate", url=login)


async def test_the_model_reads_the_refusal_of_an_unknown_operation(stack: Stack) -> None:
    stack.models.push(
        Turn.call(ToolCall(NAV, {"operation": "browser_fly", "arguments": {}}, id="c-fly")),
        Turn.say("That operation does not exist."),
    )
    async with stack.client() as client:
        chunks = await chat(client, await new_session(client), "fly")
    [error] = of_type(chunks, "tool-output-error")
    assert error["toolCallId"] == "c-fly"
    assert "unknown browser operation 'browser_fly'" in error["errorText"]
    assert "browser_navigate" in error["errorText"]


EXPORTED_MARKDOWN = "# Page\nThe exported body."


def _exporting_server() -> MCPServer:
    """An MCP server of the SDK with a `browser_export` that answers text and resource parts, and the
    `browser_tabs` list/new/select the bridge keeps each session's tabs with (Playwright's text format)."""
    server = MCPServer("exporting-peer")
    tabs: list[str] = []
    current: list[int] = []

    def listing() -> types.CallToolResult:
        lines = [
            f"- {i}:{' (current)' if current and current[0] == i else ''} [Tab]({url})" for i, url in enumerate(tabs)
        ]
        text = "\n".join(lines) or "No open tabs. Navigate to a URL to create one."
        return types.CallToolResult(content=[types.TextContent(type="text", text=f"### Result\n{text}")])

    def browser_tabs(action: str, index: int | None = None) -> types.CallToolResult:
        if action == "new":
            tabs.append("about:blank")
            current[:] = [len(tabs) - 1]
        elif action == "select" and index is not None:
            current[:] = [index]
        return listing()

    def browser_export() -> types.CallToolResult:
        return types.CallToolResult(
            content=[
                types.TextContent(type="text", text="Exported the page."),
                types.EmbeddedResource(
                    type="resource",
                    resource=types.TextResourceContents(
                        uri="file:///exports/page.md", mime_type="text/markdown", text=EXPORTED_MARKDOWN
                    ),
                ),
                types.ResourceLink(
                    type="resource_link", name="trace", uri="file:///exports/trace.zip", mime_type="application/zip"
                ),
            ]
        )

    server.add_tool(browser_tabs, name="browser_tabs")
    server.add_tool(browser_export, name="browser_export")
    return server


async def _answering(b: Bridge) -> None:
    """Once the bridge has found the server behind the socket again (its first call after a swap may fail)."""

    async def lists() -> bool:
        try:
            await b.op("browser_tabs", action="list")
        except grpc.aio.AioRpcError:
            return False
        return True

    await eventually(lists, within=30, interval=0.2, what="the bridge to reach the browser server")


@contextlib.asynccontextmanager
async def exporting_server_behind_the_socket(peer: BrowserPeer, b: Bridge) -> AsyncIterator[None]:
    """The SDK server in the real browser server's place (on the port the socket relays to) for the
    block; then the real server again, answering the bridge before the next test."""
    await peer.kill()
    security = TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=[SOCKET_HOST])
    app = _exporting_server().streamable_http_app(transport_security=security)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=peer.port, log_level="warning"))
    serving = asyncio.create_task(server.serve())
    try:
        await eventually(lambda: server.started, what="the exporting server to start")
        await _answering(b)
        yield
    finally:
        server.should_exit = True
        await serving
        await peer.start()
        await _answering(b)


async def test_resource_parts_reach_the_model_and_the_ui_with_their_uri_mime_type_and_text(
    stack: Stack, peer: BrowserPeer
) -> None:
    async with stack.client() as client:
        session = await new_session(client)
        async with bridge(stack, f"export-{uuid.uuid4().hex[:8]}") as b, exporting_server_behind_the_socket(peer, b):
            stack.models.push(
                Turn.call(ToolCall(NAV, {"operation": "browser_export", "arguments": {}}, id="c-exp")),
                Turn.say("Exported."),
            )
            chunks = await chat(client, session, "export the page")
    [output] = [c for c in of_type(chunks, "tool-output-available") if c["toolCallId"] == "c-exp"]
    expected = [
        {"type": "text", "text": "Exported the page."},
        {"type": "resource", "uri": "file:///exports/page.md", "mimeType": "text/markdown", "text": EXPORTED_MARKDOWN},
        {"type": "resource", "uri": "file:///exports/trace.zip", "mimeType": "application/zip", "text": ""},
    ]
    assert output["output"][0]["content"] == expected
    # The model read the same parts as the tool's result.
    [result] = [m for m in stack.models.requests[-1]["messages"] if m["role"] == "tool"]
    [summary] = json.loads(result["content"])
    assert summary["content"] == expected


def test_resource_parts_are_kept_with_their_uri_mime_type_and_text_and_scrubbed() -> None:
    # The bridge's conversion on its own: a blob resource, and bound secret values scrubbed from
    # resource text and URIs as from text.
    secret = "hunter2-" + uuid.uuid4().hex
    result = types.CallToolResult(
        content=[
            types.TextContent(type="text", text="Exported the page."),
            types.EmbeddedResource(
                type="resource",
                resource=types.TextResourceContents(
                    uri="file:///exports/page.md", mime_type="text/markdown", text=f"# Page\npassword: {secret}"
                ),
            ),
            types.EmbeddedResource(
                type="resource",
                resource=types.BlobResourceContents(
                    uri="file:///exports/page.pdf", mime_type="application/pdf", blob="JVBERi0xLjQK"
                ),
            ),
            types.ResourceLink(
                type="resource_link",
                name="trace",
                uri=f"file:///exports/{secret}/trace.zip",
                mime_type="application/zip",
            ),
        ]
    )
    outcome = _outcome(result, Scrubber(frozenset({secret})))
    assert not outcome.is_error
    assert [(p.kind, p.uri, p.mime_type, p.text) for p in outcome.parts] == [
        ("text", "", "", "Exported the page."),
        ("resource", "file:///exports/page.md", "text/markdown", "# Page\npassword: [redacted]"),
        ("resource", "file:///exports/page.pdf", "application/pdf", "JVBERi0xLjQK"),
        ("resource", "file:///exports/[redacted]/trace.zip", "application/zip", ""),
    ]
