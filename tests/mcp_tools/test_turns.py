"""Users' MCP servers' tools in real turns: a streamable HTTP server (the `mcp` SDK, over real HTTP,
with a bearer token) and a stdio one (in the sandbox) are added through the API; the scripted model
calls their tools as mcp__<server>__<tool>; the calls of either server pass the PreToolUse hooks (a matcher
`mcp__guarded__.*` denies them), the approval gate (an `ask` rule holds one until approved) and
tracing (`mcp.call`); a server that dies mid-call fails the call within the call timeout, and the
next turn works once it runs again; a tool the server adds is offered from the next turn."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator

import httpx
import orjson
import pytest
from chat.approvals import answer_approval, chatting, pending, supervisor_policy
from chat.helpers import chat, new_session, of_type, text_of

from mcp_tools.harness import STDIO_SERVER, added_server, offered_tools, serving_peer, tool_results
from support.https_receiver import answer
from support.model_gateway import ToolCall, Turn
from support.stacks import Stack
from support.tracing import collecting_spans
from support.waiting import eventually

TOKEN = "turn-token-" + uuid.uuid4().hex
# POPAGENT_MCP_CALL_TIMEOUT_S of the stack (support/stacks.py MCP_TOOLS_STACK).
CALL_TIMEOUT_S = 4.0


async def test_a_turn_calls_an_http_servers_tools_with_text_images_and_resources(stack: Stack) -> None:
    stack.models.push(
        Turn.call(
            ToolCall("mcp__remote__echo", {"text": "hello"}, id="e1"),
            ToolCall("mcp__remote__picture", {}, id="p1"),
        ),
        Turn.say("Done."),
    )
    async with (
        stack.client() as client,
        serving_peer(TOKEN) as peer,
        added_server(client, name="remote", transport="http", url=peer.url, token=TOKEN),
    ):
        session = await new_session(client)
        with collecting_spans() as spans:
            chunks = await chat(client, session, "use the remote tools")
    assert text_of(chunks) == "Done."
    first, second = stack.models.requests[0], stack.models.requests[1]
    offered = offered_tools(first)
    assert {"mcp__remote__echo", "mcp__remote__picture", "mcp__remote__slow", "mcp__remote__grow"} <= set(offered)
    [echo_schema] = [t["function"] for t in first["tools"] if t["function"]["name"] == "mcp__remote__echo"]
    assert echo_schema["parameters"]["properties"]["text"]["type"] == "string"
    assert echo_schema["description"] == "Echo the text back, prefixed."
    results = tool_results(second)
    assert any("echo: hello" in result for result in results), results
    picture = next(result for result in results if "a tiny picture" in result)
    assert "memo://note" in picture and "the note" in picture and "image/png" in picture
    # The image itself reaches the model as an image part after the result.
    assert "data:image/png;base64," in orjson.dumps(second).decode()
    outputs = {c["toolCallId"]: c for c in of_type(chunks, "tool-output-available")}
    assert set(outputs) == {"e1", "p1"}
    calls = spans.named("mcp.call")
    assert sorted(str((span.attributes or {}).get("mcp.tool.name")) for span in calls) == ["echo", "picture"]
    tool_spans = {span.context.span_id: span for span in spans.named("tool.call") if span.context}
    for span in calls:
        assert span.parent is not None and span.parent.span_id in tool_spans


# Per transport: the server's tool the tests call, its arguments, and what its result holds when it ran.
CALLED = {
    "http": ("echo", {"text": "approved"}, "echo: approved"),
    "stdio": ("environment", {}, "names="),
}


@contextlib.asynccontextmanager
async def server_of(client: httpx.AsyncClient, transport: str, name: str) -> AsyncIterator[None]:
    """A server named `name` added through the API: the HTTP peer, or the stdio server in the sandbox."""
    if transport == "stdio":
        async with added_server(client, name=name, transport="stdio", command="python", args=["-c", STDIO_SERVER]):
            yield
        return
    async with serving_peer() as peer, added_server(client, name=name, transport="http", url=peer.url):
        yield


@pytest.mark.parametrize("transport", ["http", "stdio"])
async def test_a_pre_tool_use_matcher_for_the_server_denies_its_tools(stack: Stack, transport: str) -> None:
    tool, arguments, ran = CALLED[transport]
    stack.receiver.script("/pre-tool", answer("deny", reason="guarded tools are off"))
    stack.models.push(Turn.call(ToolCall(f"mcp__guarded__{tool}", arguments, id="g1")), Turn.say("Understood."))
    async with stack.client() as client, server_of(client, transport, "guarded"):
        session = await new_session(client)
        chunks = await chat(client, session, "try it")
    assert text_of(chunks) == "Understood."
    [result] = tool_results(stack.models.requests[1])
    assert "denied by a hook: guarded tools are off" in result and ran not in result
    [hook_call] = stack.hook_requests("PreToolUse")
    assert hook_call["detail"]["toolName"] == f"mcp__guarded__{tool}"
    assert hook_call["detail"]["arguments"] == arguments


@pytest.mark.parametrize("transport", ["http", "stdio"])
async def test_an_ask_rule_holds_an_mcp_call_until_it_is_approved(stack: Stack, transport: str) -> None:
    tool, arguments, ran = CALLED[transport]
    stack.models.push(Turn.call(ToolCall(f"mcp__remote__{tool}", arguments, id="a1")), Turn.say("Done."))
    async with (
        stack.client() as client,
        server_of(client, transport, "remote"),
        supervisor_policy(client, [{"tool": f"mcp__remote__{tool}", "decision": "ask"}]),
    ):
        session = await new_session(client)
        async with chatting(client, session) as turn:
            [approval] = await pending(client, session)
            assert (approval["toolName"], approval["arguments"]) == (f"mcp__remote__{tool}", arguments)
            await asyncio.sleep(0.5)
            assert len(stack.models.requests) == 1  # nothing ran: the model was not asked again
            await answer_approval(client, approval["id"], "approve")
            chunks = await asyncio.wait_for(turn, 30)
    assert text_of(chunks) == "Done."
    assert any(ran in result for result in tool_results(stack.models.requests[1]))


async def test_a_stdio_server_runs_in_the_sandbox_without_network_or_the_services_environment(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The stack's services run in this process: what its environment holds, a server must not see.
    monkeypatch.setenv("DATABASE_URL", stack.dsn)
    monkeypatch.setenv("NINEROUTER_API_KEY", "canary-key")
    gateway_port = int(stack.url.rsplit(":", 1)[1])
    stack.models.push(
        Turn.call(
            ToolCall("mcp__local__environment", {}, id="s1"),
            ToolCall("mcp__local__reach", {"host": "127.0.0.1", "port": gateway_port}, id="s2"),
            ToolCall("mcp__local__reach", {"host": "1.1.1.1", "port": 443}, id="s3"),
        ),
        Turn.say("Checked."),
    )
    async with (
        stack.client() as client,
        added_server(client, name="local", transport="stdio", command="python", args=["-c", STDIO_SERVER]) as server,
    ):
        tested = (await client.post(f"/api/mcp-servers/{server['id']}/test")).json()
        assert tested["ok"] is True, tested
        assert sorted(tool["modelName"] for tool in tested["tools"]) == ["mcp__local__environment", "mcp__local__reach"]
        session = await new_session(client)
        chunks = await chat(client, session, "look around")
    assert text_of(chunks) == "Checked."
    results = tool_results(stack.models.requests[1])
    [environment] = [r for r in results if "names=" in r]
    assert "database_url=None" in environment
    for secret in ("DATABASE_URL", "NINEROUTER_API_KEY", "canary-key", stack.dsn):
        assert secret not in environment
    reached = [r for r in results if "unreachable" in r or "connected" in r]
    assert len(reached) == 2 and all("unreachable" in r for r in reached), reached


async def test_a_server_that_dies_mid_call_fails_the_call_in_time_and_the_next_turn_works_after_it_restarts(
    stack: Stack,
) -> None:
    async with (
        stack.client() as client,
        serving_peer() as peer,
        added_server(client, name="remote", transport="http", url=peer.url),
    ):
        session = await new_session(client)
        stack.models.push(Turn.call(ToolCall("mcp__remote__slow", {"seconds": 60}, id="d1")), Turn.say("It broke."))
        turn = asyncio.create_task(chat(client, session, "wait"))

        async def model_asked() -> int:
            return len(stack.models.requests)

        await eventually(model_asked, what="the model to call the slow tool")
        await asyncio.sleep(0.5)  # the call is on its way to the server
        killed_at = time.monotonic()
        await peer.kill()
        chunks = await asyncio.wait_for(turn, 30)
        took = time.monotonic() - killed_at
        assert text_of(chunks) == "It broke."
        assert took < CALL_TIMEOUT_S + 2, took
        [failure] = tool_results(stack.models.requests[1])
        assert "mcp__remote__slow failed" in failure and "slept" not in failure, failure
        # The server comes back on the same address: the next turn reconnects and its call works.
        await peer.start()
        stack.models.push(Turn.call(ToolCall("mcp__remote__echo", {"text": "back"}, id="d2")), Turn.say("Back."))
        chunks = await chat(client, session, "again")
        assert text_of(chunks) == "Back."
        assert any("echo: back" in result for result in tool_results(stack.models.requests[3]))


async def test_a_tool_the_server_adds_is_offered_from_the_next_turn(stack: Stack) -> None:
    async with (
        stack.client() as client,
        serving_peer() as peer,
        added_server(client, name="remote", transport="http", url=peer.url, agents={"popagent": {}}),
    ):
        session = await new_session(client)
        stack.models.push(Turn.call(ToolCall("mcp__remote__grow", {}, id="g1")), Turn.say("Grown."))
        assert text_of(await chat(client, session, "grow")) == "Grown."
        assert "mcp__remote__extra" not in offered_tools(stack.models.requests[0])
        stack.models.push(Turn.say("I see it."))
        await chat(client, session, "and now?")
        assert "mcp__remote__extra" in offered_tools(stack.models.requests[2])


async def test_an_agent_gets_only_the_tools_its_grant_names(stack: Stack) -> None:
    async with (
        stack.client() as client,
        serving_peer() as peer,
        added_server(client, name="remote", transport="http", url=peer.url, agents={"popagent": {"tools": ["echo"]}}),
    ):
        session = await new_session(client)
        stack.models.push(Turn.say("Fine."))
        await chat(client, session, "hi")
    mcp_tools = [name for name in offered_tools(stack.models.requests[0]) if name.startswith("mcp__")]
    assert mcp_tools == ["mcp__remote__echo"]


async def test_a_call_the_server_never_answers_fails_at_the_call_timeout_and_the_next_call_works(stack: Stack) -> None:
    stack.models.push(
        Turn.call(ToolCall("mcp__remote__slow", {"seconds": 60}, id="h1")),
        Turn.call(ToolCall("mcp__remote__echo", {"text": "still here"}, id="h2")),
        Turn.say("Recovered."),
    )
    async with (
        stack.client() as client,
        serving_peer() as peer,
        added_server(client, name="remote", transport="http", url=peer.url),
    ):
        session = await new_session(client)
        started = time.monotonic()
        chunks = await chat(client, session, "wait for it")
        took = time.monotonic() - started
    assert text_of(chunks) == "Recovered."
    assert CALL_TIMEOUT_S <= took < CALL_TIMEOUT_S + 10, took
    [timed_out] = tool_results(stack.models.requests[1])
    assert "mcp__remote__slow failed" in timed_out and "slept" not in timed_out, timed_out
    assert any("echo: still here" in result for result in tool_results(stack.models.requests[2]))
