"""bifrostNavigator's contract: an operation the live catalog does not offer, or arguments outside the
operation's input schema, are refused before the browser is asked (the server drops unknown keys
silently, so a typo would do something other than asked); what the server answers is kept part by
part, MCP resource parts included (uri, MIME type, text), scrubbed of bound secrets like text."""

from __future__ import annotations

import uuid
from typing import Any

import grpc
import pytest
from chat.helpers import chat, new_session, of_type
from mcp import types

from browser.helpers import bridge
from popagent_browser_bridge.navigator import _outcome
from popagent_browser_bridge.scrub import Scrubber
from support.browser_peer import LoginSite
from support.model_gateway import ToolCall, Turn
from support.stacks import Stack

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


def test_resource_parts_are_kept_with_their_uri_mime_type_and_text_and_scrubbed() -> None:
    # @playwright/mcp (the suite's browser server) answers text and images only, so the resource
    # parts another BifrOSt server may send are given to the bridge's conversion directly.
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
