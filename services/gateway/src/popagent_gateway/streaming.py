"""Agent-runner turn events -> AI SDK UI message stream v1 over SSE.

The gateway alone knows HTTP and the UI protocol. Each gRPC message from the runner is
a batch of typed events; each batch becomes one write of one or more SSE `data:`
lines, so the per-token cost stays off this hop. Chunks are pydantic-ai's AI SDK
chunk models (`pydantic_ai.ui.vercel_ai.response_types`), not hand-written JSON.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable

import grpc
import orjson
from pydantic_ai.ui.vercel_ai import response_types as chunks

from popagent.agent_runner.v1 import agent_runner_pb2
from popagent_gateway.errors import client_message

logger = logging.getLogger(__name__)

UI_STREAM_HEADERS = {
    "x-vercel-ai-ui-message-stream": "v1",
    "cache-control": "no-cache",
    "x-accel-buffering": "no",
}
DONE = b"data: [DONE]\n\n"
AI_SDK_VERSION = 6


def _json(text: str) -> object:
    return orjson.loads(text) if text else None


def chunks_for(event: agent_runner_pb2.TurnEvent, turn_id: str) -> Iterable[chunks.BaseChunk]:
    """The UI chunks of one runner event (usually one; none for an empty event)."""
    kind = event.WhichOneof("event")
    if kind == "start":
        yield chunks.StartChunk(
            message_id=event.start.message_id,
            message_metadata={
                "turnId": event.start.turn_id,
                "model": event.start.model,
                **({"traceId": event.start.trace_id} if event.start.trace_id else {}),
            },
        )
    elif kind == "step_start":
        yield chunks.StartStepChunk()
    elif kind == "text_start":
        yield chunks.TextStartChunk(id=event.text_start.part_id)
    elif kind == "text_delta":
        yield chunks.TextDeltaChunk(id=event.text_delta.part_id, delta=event.text_delta.delta)
    elif kind == "text_end":
        yield chunks.TextEndChunk(id=event.text_end.part_id)
    elif kind == "tool_input":
        yield chunks.ToolInputStartChunk(
            tool_call_id=event.tool_input.tool_call_id, tool_name=event.tool_input.tool_name
        )
        yield chunks.ToolInputAvailableChunk(
            tool_call_id=event.tool_input.tool_call_id,
            tool_name=event.tool_input.tool_name,
            input=_json(event.tool_input.input_json) or {},
        )
    elif kind == "tool_output":
        output = event.tool_output
        if output.is_error:
            error = _json(output.output_json)
            yield chunks.ToolOutputErrorChunk(
                tool_call_id=output.tool_call_id, error_text=error if isinstance(error, str) else str(error)
            )
        else:
            yield chunks.ToolOutputAvailableChunk(tool_call_id=output.tool_call_id, output=_json(output.output_json))
    elif kind == "agent_activity":
        yield chunks.DataChunk(
            type="data-agentActivity", id=event.agent_activity.activity_id, data=_json(event.agent_activity.data_json)
        )
    elif kind == "step_finish":
        yield chunks.FinishStepChunk()
    elif kind == "finish":
        usage = event.finish.usage
        yield chunks.FinishChunk(
            finish_reason=event.finish.finish_reason or "stop",  # type: ignore[arg-type]
            message_metadata={
                "turnId": turn_id,
                "usage": {
                    "inputTokens": usage.input_tokens,
                    "outputTokens": usage.output_tokens,
                    **({"cachedInputTokens": usage.cached_input_tokens} if usage.cached_input_tokens else {}),
                    **({"costUsd": usage.cost_usd} if usage.HasField("cost_usd") else {}),
                    **({"estimated": True} if usage.estimated else {}),
                },
            },
        )
    elif kind == "error":
        yield chunks.ErrorChunk(error_text=event.error.message or event.error.error_class)
    elif kind == "abort":
        yield chunks.AbortChunk()


class UIStreamEncoder:
    """Numbers every chunk of a turn (the SSE event id, from 0), so a client that resumes with
    `Last-Event-ID: N` gets the chunks after N: the same bytes an uninterrupted stream sent. The
    numbering is the turn's, from its first event: a replay from the turn log counts the same.
    Stateful in the turn id, which the finish chunk's metadata repeats, and in the count."""

    def __init__(self, first_id: int = 0) -> None:
        self.turn_id = ""
        # Chunks numbered below this are counted, not sent (they reached the client before).
        self.first_id = first_id
        self.next_id = 0

    def encode(self, batch: agent_runner_pb2.TurnEventBatch) -> bytes:
        lines: list[bytes] = []
        for event in batch.events:
            if event.WhichOneof("event") == "start":
                self.turn_id = event.start.turn_id
            for chunk in chunks_for(event, self.turn_id):
                chunk_id = self.next_id
                self.next_id += 1
                if chunk_id >= self.first_id:
                    lines.append(b"id: %d\ndata: %s\n\n" % (chunk_id, chunk.encode(AI_SDK_VERSION).encode()))
        return b"".join(lines)


async def sse_body(
    first: agent_runner_pb2.TurnEventBatch,
    rest: AsyncIterator[agent_runner_pb2.TurnEventBatch],
    call: grpc.aio.Call,
    *,
    first_id: int = 0,
) -> AsyncIterator[bytes]:
    """The SSE body: the already-read first batch, every later batch, then [DONE]; chunks
    numbered below `first_id` left out (a resumed stream).

    A failure after the stream started becomes an error chunk (the HTTP status is
    already sent). When the client goes away the generator is closed and the runner's
    call is cancelled: a chat turn then runs on by the agent-runtime setting
    continueOnDisconnect, a followed turn is not touched.
    """
    encoder = UIStreamEncoder(first_id)
    try:
        yield encoder.encode(first)
        async for batch in rest:
            data = encoder.encode(batch)
            if data:
                yield data
        yield DONE
    except grpc.aio.AioRpcError as exc:
        # (A client that went away cancels this generator, never an AioRpcError: a CANCELLED
        # status is the service cancelling the call, e.g. while it stops. The client still
        # gets a terminal chunk.)
        logger.warning("turn stream failed", extra={"code": exc.code().name})
        yield error_stream(client_message(exc.code(), exc.details() or ""))
    finally:
        call.cancel()


def error_stream(message: str) -> bytes:
    """A stream that failed after it started: an error chunk the UI shows, then [DONE]."""
    return b"data: " + chunks.ErrorChunk(error_text=message).encode(AI_SDK_VERSION).encode() + b"\n\n" + DONE
