"""The real AI SDK client (the `ai` package's Chat, which useChat wraps) reads the gateway's stream.

Node runs tests/ai_sdk/chat-client.mjs against the gateway over real HTTP; the message
it reconstructs must hold exactly what the runner streamed.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import grpc

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from support.ai_sdk_client import run_ai_sdk_chat

from .harness import API_KEY, Harness, batch, start


async def run_client(url: str, session_id: str, text: str) -> dict[str, Any]:
    return await run_ai_sdk_chat(url, API_KEY, session_id, text)


async def test_the_ai_sdk_client_reconstructs_text_tools_activity_and_metadata(harness: Harness) -> None:
    async def script(request: pb.ChatRequest, context: grpc.aio.ServicerContext) -> AsyncIterator[pb.TurnEventBatch]:
        yield batch(start("turn-42"), pb.TurnEvent(step_start=pb.StepBoundary()))
        yield batch(
            pb.TurnEvent(tool_input=pb.ToolInput(tool_call_id="c1", tool_name="getTime", input_json='{"zone": "UTC"}')),
            pb.TurnEvent(tool_output=pb.ToolOutput(tool_call_id="c1", output_json='"12:00"')),
            pb.TurnEvent(
                agent_activity=pb.AgentActivity(activity_id="a1", data_json='{"agent": "reviewer", "iteration": 1}')
            ),
            pb.TurnEvent(step_finish=pb.StepBoundary()),
            pb.TurnEvent(step_start=pb.StepBoundary()),
            pb.TurnEvent(text_start=pb.PartBoundary(part_id="t1")),
        )
        for piece in ("It ", "is ", "noon."):
            yield batch(pb.TurnEvent(text_delta=pb.TextDelta(part_id="t1", delta=piece)))
        yield batch(
            pb.TurnEvent(text_end=pb.PartBoundary(part_id="t1")),
            pb.TurnEvent(step_finish=pb.StepBoundary()),
            pb.TurnEvent(finish=pb.TurnFinish(finish_reason="stop", usage=pb.Usage(input_tokens=5, output_tokens=3))),
        )

    harness.runner.script = script
    result = await run_client(harness.url, "session-7", "what time is it?")

    assert result["status"] == "ready"
    assert result["errors"] == []
    user, assistant = result["messages"]  # type: ignore[misc]
    assert user["role"] == "user"
    assert user["parts"] == [{"type": "text", "text": "what time is it?"}]
    assert assistant["id"] == "a1"
    assert assistant["role"] == "assistant"
    assert assistant["metadata"] == {
        "turnId": "turn-42",
        "model": "fake/fake-chat",
        "usage": {"inputTokens": 5, "outputTokens": 3},
    }
    parts = assistant["parts"]
    assert [part["type"] for part in parts] == [
        "step-start",
        "tool-getTime",
        "data-agentActivity",
        "step-start",
        "text",
    ]
    tool = parts[1]
    assert (tool["toolCallId"], tool["state"], tool["input"], tool["output"]) == (
        "c1",
        "output-available",
        {"zone": "UTC"},
        "12:00",
    )
    assert parts[2]["data"] == {"agent": "reviewer", "iteration": 1}
    assert parts[4]["text"] == "It is noon."
    assert parts[4]["state"] == "done"

    sent = json.loads(harness.runner.requests[0].message_json)
    assert sent["role"] == "user"
    assert sent["parts"] == [{"type": "text", "text": "what time is it?"}]


async def test_the_ai_sdk_client_surfaces_an_error_chunk_as_an_error(harness: Harness) -> None:
    async def script(request: pb.ChatRequest, context: grpc.aio.ServicerContext) -> AsyncIterator[pb.TurnEventBatch]:
        yield batch(start())
        await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "model gateway answered 429: rate limited")

    harness.runner.script = script
    result = await run_client(harness.url, "session-8", "hi")
    assert result["status"] == "error"
    assert result["errors"] == ["model gateway answered 429: rate limited"]
