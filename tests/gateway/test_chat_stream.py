"""POST /api/chat over real HTTP and real gRPC: the AI SDK UI message stream the gateway encodes.

The agent-runner here is a scripted AgentRunnerService on a real gRPC server (same
protocol as the real one, with the kernel's interceptor and caller authentication);
the gateway is the real app served by uvicorn on a free port.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import grpc
import httpx
import pytest

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from popagent_core.errors import NotFound
from popagent_gateway.errors import DEPENDENCY_TEXTS
from popagent_gateway.streaming import UIStreamEncoder
from support.sse import read_sse

from .harness import API_KEY, RPC_TIMEOUT_S, USER_MESSAGE, Harness, batch, start


async def post_chat(client: httpx.AsyncClient, url: str, body: dict[str, object]) -> httpx.Response:
    return await client.post(f"{url}/api/chat", json=body, headers={"x-popagent-key": API_KEY})


async def test_a_turn_streams_the_ai_sdk_chunk_sequence(harness: Harness) -> None:
    async def script(request: pb.ChatRequest, context: grpc.aio.ServicerContext) -> AsyncIterator[pb.TurnEventBatch]:
        yield batch(start(), pb.TurnEvent(step_start=pb.StepBoundary()))
        yield batch(
            pb.TurnEvent(tool_input=pb.ToolInput(tool_call_id="c1", tool_name="getTime", input_json="{}")),
            pb.TurnEvent(tool_output=pb.ToolOutput(tool_call_id="c1", output_json='{"now": "noon"}')),
            pb.TurnEvent(
                agent_activity=pb.AgentActivity(
                    activity_id="act1", data_json='{"agent": "researcher", "status": "done"}'
                )
            ),
        )
        yield batch(
            pb.TurnEvent(text_start=pb.PartBoundary(part_id="t1")),
            pb.TurnEvent(text_delta=pb.TextDelta(part_id="t1", delta="It is ")),
            pb.TurnEvent(text_delta=pb.TextDelta(part_id="t1", delta="noon.")),
            pb.TurnEvent(text_end=pb.PartBoundary(part_id="t1")),
            pb.TurnEvent(step_finish=pb.StepBoundary()),
            pb.TurnEvent(finish=pb.TurnFinish(finish_reason="stop", usage=pb.Usage(input_tokens=7, output_tokens=3))),
        )

    harness.runner.script = script
    async with httpx.AsyncClient() as client:
        response = await post_chat(
            client,
            harness.url,
            {"id": "s1", "model": "fake/fake-chat", "workspaceId": "popagent", "message": USER_MESSAGE},
        )
        assert response.status_code == 200, response.text
        assert response.headers["x-vercel-ai-ui-message-stream"] == "v1"
        assert response.headers["content-type"].startswith("text/event-stream")
        events = await read_sse(response)
    assert events == [
        {"type": "start", "messageId": "a1", "messageMetadata": {"turnId": "turn-1", "model": "fake/fake-chat"}},
        {"type": "start-step"},
        {"type": "tool-input-start", "toolCallId": "c1", "toolName": "getTime"},
        {"type": "tool-input-available", "toolCallId": "c1", "toolName": "getTime", "input": {}},
        {"type": "tool-output-available", "toolCallId": "c1", "output": {"now": "noon"}},
        {"type": "data-agentActivity", "id": "act1", "data": {"agent": "researcher", "status": "done"}},
        {"type": "text-start", "id": "t1"},
        {"type": "text-delta", "id": "t1", "delta": "It is "},
        {"type": "text-delta", "id": "t1", "delta": "noon."},
        {"type": "text-end", "id": "t1"},
        {"type": "finish-step"},
        {
            "type": "finish",
            "finishReason": "stop",
            "messageMetadata": {"turnId": "turn-1", "usage": {"inputTokens": 7, "outputTokens": 3}},
        },
        "[DONE]",
    ]
    sent = harness.runner.requests[0]
    assert (sent.session_id, sent.model, sent.workspace_id) == ("s1", "fake/fake-chat", "popagent")
    assert json.loads(sent.message_json)["parts"] == [{"type": "text", "text": "hello"}]


async def test_unknown_session_is_a_404_before_any_stream(harness: Harness) -> None:
    async def script(request: pb.ChatRequest, context: grpc.aio.ServicerContext) -> AsyncIterator[pb.TurnEventBatch]:
        raise NotFound(f"session {request.session_id} not found")
        yield batch()

    harness.runner.script = script
    async with httpx.AsyncClient() as client:
        response = await post_chat(client, harness.url, {"id": "nope", "message": USER_MESSAGE})
    assert response.status_code == 404
    assert response.json() == {"error": "session nope not found"}


async def test_a_failure_after_the_start_becomes_an_error_chunk_then_done(harness: Harness) -> None:
    async def script(request: pb.ChatRequest, context: grpc.aio.ServicerContext) -> AsyncIterator[pb.TurnEventBatch]:
        yield batch(start())
        await context.abort(grpc.StatusCode.UNAVAILABLE, "Stream removed (Socket closed)")

    harness.runner.script = script
    async with httpx.AsyncClient() as client:
        response = await post_chat(client, harness.url, {"id": "s1", "message": USER_MESSAGE})
        events = await read_sse(response)
    # The transport's words never reach the user: the text of the status says what to do (issue 22).
    assert events[-2:] == [{"type": "error", "errorText": DEPENDENCY_TEXTS[grpc.StatusCode.UNAVAILABLE]}, "[DONE]"]


async def test_an_unavailable_service_answers_503_with_retry_after_and_no_library_text(harness: Harness) -> None:
    async def script(request: pb.ChatRequest, context: grpc.aio.ServicerContext) -> AsyncIterator[pb.TurnEventBatch]:
        await context.abort(grpc.StatusCode.UNAVAILABLE, "database error: FileNotFoundError")
        yield batch(start())

    harness.runner.script = script
    async with httpx.AsyncClient() as client:
        response = await post_chat(client, harness.url, {"id": "s1", "message": USER_MESSAGE})
    assert response.status_code == 503
    assert response.headers["retry-after"] == "5"
    assert response.json() == {"error": DEPENDENCY_TEXTS[grpc.StatusCode.UNAVAILABLE]}


async def test_client_disconnect_cancels_the_turn(harness: Harness) -> None:
    async def script(request: pb.ChatRequest, context: grpc.aio.ServicerContext) -> AsyncIterator[pb.TurnEventBatch]:
        yield batch(start(), pb.TurnEvent(text_start=pb.PartBoundary(part_id="t1")))
        while True:
            await asyncio.sleep(0.01)
            yield batch(pb.TurnEvent(text_delta=pb.TextDelta(part_id="t1", delta="x")))

    harness.runner.script = script
    async with (
        httpx.AsyncClient() as client,
        client.stream(
            "POST",
            f"{harness.url}/api/chat",
            json={"id": "s1", "message": USER_MESSAGE},
            headers={"x-popagent-key": API_KEY},
        ) as response,
    ):
        async for line in response.aiter_lines():
            if '"text-delta"' in line:
                break
    await asyncio.wait_for(harness.runner.cancelled.wait(), timeout=5)


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"id": "s1", "message": USER_MESSAGE, "tools": []}, "extra_forbidden"),
        ({"id": "s1", "message": USER_MESSAGE, "messages": [USER_MESSAGE]}, "extra_forbidden"),
        # An assistant message is taken only as answers to tool approvals (docs/approvals.md).
        ({"id": "s1", "message": {**USER_MESSAGE, "role": "assistant"}}, "must answer at least one tool approval"),
        ({"id": "s1", "message": {**USER_MESSAGE, "role": "system"}}, "union_tag_invalid"),
        ({"id": "", "message": USER_MESSAGE}, "string_too_short"),
        ({"message": USER_MESSAGE}, "missing"),
    ],
)
async def test_requests_carrying_anything_but_the_newest_user_message_are_refused(
    refusing_harness: Harness, body: dict[str, object], fragment: str
) -> None:
    async with httpx.AsyncClient() as client:
        response = await post_chat(client, refusing_harness.url, body)
    assert response.status_code == 422
    assert fragment in response.text
    assert refusing_harness.runner.requests == []


async def test_a_message_without_parts_is_refused_with_a_reason(refusing_harness: Harness) -> None:
    async with httpx.AsyncClient() as client:
        response = await post_chat(client, refusing_harness.url, {"id": "s1", "message": {**USER_MESSAGE, "parts": []}})
    assert response.status_code == 400
    assert response.json() == {"error": "message must have 1 to 64 parts"}


async def test_chat_needs_the_api_key(refusing_harness: Harness) -> None:
    async with httpx.AsyncClient() as client:
        response = await client.post(f"{refusing_harness.url}/api/chat", json={"id": "s1", "message": USER_MESSAGE})
    assert response.status_code == 401
    assert refusing_harness.runner.requests == []


async def test_a_unary_call_past_the_rpc_timeout_answers_504(harness: Harness) -> None:
    """POPAGENT_GATEWAY_RPC_TIMEOUT_S is the deadline of every unary call the routes make."""
    async with httpx.AsyncClient(base_url=harness.url, headers={"x-popagent-key": API_KEY}) as client:
        assert (await client.get("/api/memories")).json() == {"memories": []}
        harness.runner.list_memories_delay_s = RPC_TIMEOUT_S * 5
        loop = asyncio.get_running_loop()
        started = loop.time()
        response = await client.get("/api/memories")
        elapsed = loop.time() - started
    assert response.status_code == 504
    assert "error" in response.json()
    assert elapsed < RPC_TIMEOUT_S * 4


async def test_a_streamed_turn_is_not_cut_by_the_rpc_timeout(harness: Harness) -> None:
    """The chat turn is a server stream: it runs for as long as it works, past the unary deadline."""

    async def script(request: pb.ChatRequest, context: grpc.aio.ServicerContext) -> AsyncIterator[pb.TurnEventBatch]:
        yield batch(start(), pb.TurnEvent(text_start=pb.PartBoundary(part_id="t1")))
        for _ in range(4):
            await asyncio.sleep(RPC_TIMEOUT_S)
            yield batch(pb.TurnEvent(text_delta=pb.TextDelta(part_id="t1", delta="x")))
        yield batch(pb.TurnEvent(text_end=pb.PartBoundary(part_id="t1")), pb.TurnEvent(finish=pb.TurnFinish()))

    harness.runner.script = script
    async with httpx.AsyncClient(timeout=30) as client:
        response = await post_chat(client, harness.url, {"id": "s1", "message": USER_MESSAGE})
        events = await read_sse(response)
    assert [e["delta"] for e in events if isinstance(e, dict) and e.get("type") == "text-delta"] == ["x"] * 4
    assert events[-1] == "[DONE]"
    assert not any(isinstance(e, dict) and e.get("type") == "error" for e in events)


async def test_secret_tool_payloads_are_redacted_before_the_message_leaves_the_gateway(harness: Harness) -> None:
    async def script(request: pb.ChatRequest, context: grpc.aio.ServicerContext) -> AsyncIterator[pb.TurnEventBatch]:
        yield batch(start(), pb.TurnEvent(finish=pb.TurnFinish()))

    message = {
        **USER_MESSAGE,
        "parts": [
            *USER_MESSAGE["parts"],  # type: ignore[misc]
            {
                "type": "tool-storeSecret",
                "toolCallId": "old-1",
                "state": "output-available",
                "input": {"name": "bank", "value": "hunter2"},
                "output": {"stored": "hunter2"},
            },
            {
                "type": "tool-useBrowserSecret",
                "toolCallId": "c2",
                "state": "output-available",
                "input": {"name": "bank", "ref": "e7", "typed": "hunter2"},
                "output": {"name": "bank", "origin": "https://bank.example", "success": True, "echo": "hunter2"},
            },
        ],
    }
    harness.runner.script = script
    async with httpx.AsyncClient() as client:
        response = await post_chat(client, harness.url, {"id": "s1", "message": message})
        await read_sse(response)
    [request] = harness.runner.requests
    assert "hunter2" not in request.message_json
    parts = json.loads(request.message_json)["parts"]
    assert (parts[1]["input"], parts[1]["output"]) == ("[redacted]", "[redacted]")
    assert parts[2]["input"] == {"name": "bank", "ref": "e7"}
    assert parts[2]["output"] == {"name": "bank", "origin": "https://bank.example", "success": True}
    assert parts[0] == USER_MESSAGE["parts"][0]  # type: ignore[index]


def test_a_turn_that_begins_again_is_sent_from_its_new_start_to_a_client_ahead_of_its_log() -> None:
    """A client that got more chunks of a lost attempt than its log kept (the runner died before its
    last batches reached the log) still gets the whole of the turn's next attempt."""
    encoder = UIStreamEncoder(first_id=6)

    def delta(text: str) -> pb.TurnEvent:
        return pb.TurnEvent(text_delta=pb.TextDelta(part_id="p", delta=text))

    lost = encoder.encode(batch(start(), delta("a"), delta("b")))
    again = encoder.encode(batch(start(), delta("c")))
    assert lost == b""
    assert again == (
        b'id: 3\ndata: {"type":"start","messageId":"a1","messageMetadata":{"turnId":"turn-1","model":"fake/fake-chat"}}'
        b'\n\nid: 4\ndata: {"type":"text-delta","delta":"c","id":"p"}\n\n'
    )
