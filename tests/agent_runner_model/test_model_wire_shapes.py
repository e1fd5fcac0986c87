"""Stream shapes the scripted gateway does not produce, fed as the same bytes to both models.

The gateway speaks text and tool calls; reasoning fields (`reasoning_content`), `<think>` tags as
whole tokens, refusals, logprobs, vendor extras and error events are wire shapes of other
OpenAI-compatible servers. These cases give both models identical SSE bytes, split into network
reads at awkward places, through each HTTP library's in-process transport, and compare what they
assemble, event by event with merging off and as a whole with it on.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import httpx2
import pytest
from model_twins import PROVIDER, stable
from openai import AsyncOpenAI
from pydantic import TypeAdapter
from pydantic_ai.direct import model_request, model_request_stream
from pydantic_ai.exceptions import (
    ModelAPIError,
    ModelConnectionError,
    ModelHTTPError,
    ModelOverloadedError,
    ModelRateLimitError,
    UnexpectedModelBehavior,
)
from pydantic_ai.messages import (
    AgentStreamEvent,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ThinkingPart,
    UserPromptPart,
)
from pydantic_ai.models import Model, ModelRequestParameters
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai_compatible import OpenAICompatibleProvider
from pydantic_ai.tools import ToolDefinition

from popagent_agent_runner.llm import request as lean_request
from popagent_agent_runner.llm.model import LeanOpenAIModel, streaming_to

BASE_URL = "http://wire.test/v1"
MODEL = "deepseek/deepseek-reasoner"
EVENTS: TypeAdapter[AgentStreamEvent] = TypeAdapter(AgentStreamEvent)
PARAMS = ModelRequestParameters(
    function_tools=[ToolDefinition(name="lookup", parameters_json_schema={"type": "object", "properties": {}})],
    allow_text_output=True,
)


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "delta": delta or {}, "finish_reason": finish}
    return {
        "id": "chatcmpl-w",
        "object": "chat.completion.chunk",
        "created": 1767225600,
        "model": MODEL,
        "choices": [choice],
        **extra,
    }


def usage_chunk(prompt: int = 11, completion: int = 7) -> dict[str, Any]:
    usage = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "completion_tokens_details": {"reasoning_tokens": 3},
        "prompt_tokens_details": {"cached_tokens": 2},
    }
    return {
        "id": "chatcmpl-w",
        "object": "chat.completion.chunk",
        "created": 1767225600,
        "model": MODEL,
        "choices": [],
        "usage": usage,
    }


def sse(events: Sequence[dict[str, Any] | str], *, crlf: bool = False, split: int = 0) -> list[bytes]:
    """The events as SSE bytes, cut into network reads: whole events, or every `split` bytes."""
    newline = b"\r\n" if crlf else b"\n"
    frames = [b"data: " + (e.encode() if isinstance(e, str) else json.dumps(e).encode()) + newline * 2 for e in events]
    if not split:
        return frames
    data = b"".join(frames)
    return [data[i : i + split] for i in range(0, len(data), split)]


@dataclass
class Wire:
    """Serves the same scripted bytes to whichever HTTP library asks, and keeps the request bodies."""

    reads: list[bytes]
    status: int = 200
    bodies: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])

    async def _stream(self) -> AsyncIterator[bytes]:
        for read in self.reads:
            yield read

    async def for_httpx(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(json.loads(request.content))
        if not json.loads(request.content).get("stream"):
            return httpx.Response(
                self.status, content=b"".join(self.reads), headers={"content-type": "application/json"}
            )
        return httpx.Response(self.status, content=self._stream(), headers={"content-type": "text/event-stream"})

    async def for_httpx2(self, request: httpx2.Request) -> httpx2.Response:
        self.bodies.append(json.loads(request.content))
        if not json.loads(request.content).get("stream"):
            return httpx2.Response(
                self.status, content=b"".join(self.reads), headers={"content-type": "application/json"}
            )
        return httpx2.Response(self.status, content=self._stream(), headers={"content-type": "text/event-stream"})


def lean(wire: Wire, **options: Any) -> LeanOpenAIModel:
    client = httpx.AsyncClient(transport=httpx.MockTransport(wire.for_httpx))
    return LeanOpenAIModel(MODEL, base_url=BASE_URL, api_key="k", provider_name=PROVIDER, http_client=client, **options)


def reference(wire: Wire) -> OpenAIChatModel:
    client = AsyncOpenAI(
        base_url=BASE_URL,
        api_key="k",
        max_retries=0,
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(wire.for_httpx2)),
    )
    return OpenAIChatModel(MODEL, provider=OpenAICompatibleProvider(PROVIDER, openai_client=client))


@dataclass
class Sink:
    text: dict[int, str] = field(default_factory=dict[int, str])
    thinking: dict[int, str] = field(default_factory=dict[int, str])

    def text_delta(self, index: int, delta: str) -> None:
        self.text[index] = self.text.get(index, "") + delta

    def thinking_delta(self, index: int, delta: str) -> None:
        self.thinking[index] = self.thinking.get(index, "") + delta


async def streamed(model: Model, sink: Sink | None = None) -> tuple[ModelResponse, list[Any]]:
    events: list[Any] = []
    with streaming_to(sink):
        async with model_request_stream(
            model, [ModelRequest(parts=[UserPromptPart("Go")])], model_request_parameters=PARAMS
        ) as stream:
            async for event in stream:
                events.append(stable(EVENTS.dump_python(event, mode="json")))
            return stream.get(), events


def dumped(response: ModelResponse) -> Any:
    return stable(ModelMessagesTypeAdapter.dump_python([response], mode="json"))


STREAMS: dict[str, list[dict[str, Any] | str]] = {
    "reasoning_then_text": [
        chunk({"role": "assistant", "content": None, "reasoning_content": "Let"}),
        *(chunk({"reasoning_content": piece}) for piece in [" me", " think", " hard", "."]),
        chunk({"content": "", "reasoning_content": None}),
        *(chunk({"content": piece}) for piece in ["The", " answer", " is", " 42", "."]),
        chunk({}, "stop"),
        usage_chunk(),
        "[DONE]",
    ],
    "think_tags_in_content": [
        *(
            chunk({"content": p})
            for p in ["<think>", "hmm", ", let", " me", " see", "</think>", "\n\n", "It", "'s", " 7"]
        ),
        chunk({}, "stop"),
        usage_chunk(),
        "[DONE]",
    ],
    "split_tags_are_text": [
        *(chunk({"content": p}) for p in ["a <", "think", ">", "b", "</thi", "nk>", " c"]),
        chunk({}, "stop"),
        "[DONE]",
    ],
    # Merged, "<thi" and "nk>" would spell a tag neither piece is; the tag after them forces the handover.
    "merged_pieces_spell_a_tag": [
        *(chunk({"content": p}) for p in ["x", "<thi", "nk>", "</think>", "y"]),
        chunk({}, "stop"),
        "[DONE]",
    ],
    "text_reasoning_text_tool": [
        *(chunk({"content": p}) for p in ["First", " part"]),
        *(chunk({"reasoning": p}) for p in ["re", "think"]),
        chunk({"content": " "}),
        *(chunk({"content": p}) for p in ["Second", " part"]),
        chunk(
            {
                "tool_calls": [
                    {"index": 0, "id": "call_x", "type": "function", "function": {"name": "lookup", "arguments": ""}}
                ]
            }
        ),
        *(chunk({"tool_calls": [{"index": 0, "function": {"arguments": p}}]}) for p in ["{", '"q"', ": 1", "}"]),
        chunk({}, "tool_calls"),
        "[DONE]",
    ],
    "refusal": [
        chunk({"role": "assistant", "refusal": "I can't"}),
        chunk({"refusal": " help with that."}),
        chunk({}, "stop"),
        "[DONE]",
    ],
    "logprobs_and_length": [
        chunk(
            {"content": "Hi"},
            logprobs={"content": [{"token": "Hi", "logprob": -0.1, "bytes": [72, 105], "top_logprobs": []}]},
        ),
        chunk({"content": " there"}, logprobs={"content": [{"token": " there", "logprob": -0.2, "top_logprobs": []}]}),
        chunk({}, "length"),
        "[DONE]",
    ],
    "content_as_parts_and_odd_finish": [
        chunk({"content": [{"type": "text", "text": "Part"}, {"type": "text", "text": "ed"}]}),
        chunk({"content": " text"}),
        chunk({}, "guardrail_intervened"),
        "[DONE]",
    ],
    "parallel_calls_interleaved_with_extra_content": [
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "c0",
                        "function": {"name": "lookup", "arguments": ""},
                        "extra_content": {"google": {"thought_signature": "sig"}},
                    }
                ]
            }
        ),
        chunk({"tool_calls": [{"index": 1, "id": "c1", "function": {"name": "lookup", "arguments": '{"a"'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"b"'}}]}),
        chunk({"tool_calls": [{"index": 1, "function": {"arguments": ": 1}"}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": ": 2}"}}]}),
        chunk({}, "tool_calls"),
        "[DONE]",
    ],
    "no_finish_reason": [chunk({"content": "done"}), "[DONE]"],
    "service_tier_and_null_delta": [
        chunk({"content": "x"}, service_tier="default"),
        {"id": "chatcmpl-w", "created": 1767225600, "model": MODEL, "choices": [{"index": 0, "delta": None}]},
        chunk({}, "stop"),
        "[DONE]",
    ],
}


@pytest.mark.parametrize("shape", sorted(STREAMS))
@pytest.mark.parametrize("framing", ["events", "split7_crlf", "split3"])
async def test_stream_shapes_assemble_like_the_reference(shape: str, framing: str) -> None:
    events_in = STREAMS[shape]
    reads = {
        "events": sse(events_in),
        "split7_crlf": sse(events_in, crlf=True, split=7),
        "split3": sse(events_in, split=3),
    }[framing]
    theirs, their_events = await streamed(reference(Wire(reads)))
    unmerged, unmerged_events = await streamed(lean(Wire(reads), coalesce_window=0.0))
    sink = Sink()
    merged, _ = await streamed(lean(Wire(reads), coalesce_window=60.0), sink)

    assert dumped(unmerged) == dumped(theirs)
    assert unmerged_events == their_events
    assert dumped(merged) == dumped(theirs)
    # The sink saw exactly the text and reasoning the assembled response holds, part by part.
    assert sink.text == {i: p.content for i, p in enumerate(merged.parts) if isinstance(p, TextPart) and p.content}
    assert sink.thinking == {
        i: p.content for i, p in enumerate(merged.parts) if isinstance(p, ThinkingPart) and p.content
    }


async def test_reasoning_and_think_tags_become_thinking_parts() -> None:
    response, _ = await streamed(lean(Wire(sse(STREAMS["reasoning_then_text"]))))
    assert [type(p).__name__ for p in response.parts] == ["ThinkingPart", "TextPart"]
    thinking = response.parts[0]
    assert isinstance(thinking, ThinkingPart)
    assert (thinking.content, thinking.id, thinking.provider_name) == (
        "Let me think hard.",
        "reasoning_content",
        PROVIDER,
    )
    assert response.usage.details == {"reasoning_tokens": 3}
    assert response.usage.cache_read_tokens == 2
    tagged, _ = await streamed(lean(Wire(sse(STREAMS["think_tags_in_content"]))))
    assert [(type(p).__name__, p.content) for p in tagged.parts if isinstance(p, TextPart | ThinkingPart)] == [
        ("ThinkingPart", "hmm, let me see"),
        ("TextPart", "It's 7"),  # the DeepSeek profile drops whitespace that would open a text part
    ]


@pytest.mark.parametrize("shape", ["reasoning_then_text", "refusal", "logprobs_and_length"])
async def test_complete_responses_assemble_like_the_reference(shape: str) -> None:
    # The same content as one non-streamed completion.
    message: dict[str, Any] = {"role": "assistant", "content": "The answer.", "reasoning_content": "Thought."}
    choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": "stop"}
    if shape == "refusal":
        message.update(content=None, refusal="No.")
    if shape == "logprobs_and_length":
        choice.update(
            finish_reason="length", logprobs={"content": [{"token": "The", "logprob": -1.0, "top_logprobs": []}]}
        )
    body = {
        "id": "chatcmpl-c",
        "object": "chat.completion",
        "created": 1767225600,
        "model": MODEL,
        "choices": [choice],
        "usage": usage_chunk()["usage"],
    }
    messages = [ModelRequest(parts=[UserPromptPart("Go")])]
    wire = Wire([json.dumps(body).encode()])
    theirs = await model_request(reference(wire), messages, model_request_parameters=PARAMS)
    ours = await model_request(lean(wire), messages, model_request_parameters=PARAMS)
    assert dumped(ours) == dumped(theirs)
    assert wire.bodies[0] == wire.bodies[1]
    assert wire.bodies[1]["stream"] is False


async def test_an_error_event_fails_like_the_reference() -> None:
    opening = sse([{"error": {"message": "Rate limit reached", "type": "rate_limit_exceeded", "code": None}}])
    for model in (reference(Wire(opening)), lean(Wire(opening))):
        with pytest.raises(ModelRateLimitError) as raised:
            await streamed(model)
        assert isinstance(raised.value, ModelHTTPError)
        assert (raised.value.status_code, raised.value.in_stream) == (429, True)

    midway = sse([chunk({"content": "partial"}), {"error": {"message": "Upstream overloaded", "type": "overloaded"}}])
    for model in (reference(Wire(midway)), lean(Wire(midway))):
        with pytest.raises(ModelOverloadedError) as overloaded:
            await streamed(model)
        assert overloaded.value.in_stream


async def test_an_empty_or_undecodable_stream_fails_like_the_reference() -> None:
    for reads in (sse(["[DONE]"]), []):
        for model in (reference(Wire(reads)), lean(Wire(reads))):
            with pytest.raises(UnexpectedModelBehavior, match="ended without content"):
                await streamed(model)
    garbled = [b"data: {not json\n\n"]
    for model in (reference(Wire(garbled)), lean(Wire(garbled))):
        with pytest.raises(ModelAPIError, match="Failed to decode response as JSON"):
            await streamed(model)


async def test_a_stream_that_ends_without_done_or_finish_reason_is_broken() -> None:
    with pytest.raises(ModelConnectionError, match="before \\[DONE\\]") as raised:
        await streamed(lean(Wire(sse([chunk({"content": "half an ans"})]))))
    assert raised.value.phase == "read"
    # With a finish reason the answer is whole even without `[DONE]` (some servers omit it).
    whole, _ = await streamed(lean(Wire(sse([chunk({"content": "whole"}), chunk({}, "stop")]))))
    assert whole.parts == [TextPart("whole")]


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (429, b"  Too Many Requests\n"),
        (502, b""),
        (500, b'{"detail": "upstream"}'),
        (404, b'{"error": {"code": "model_not_found", "message": "no such model"}}'),
    ],
    ids=["text", "empty", "json-without-error", "model-not-found"],
)
async def test_error_bodies_are_kept_like_the_reference(status: int, body: bytes) -> None:
    raised: list[ModelHTTPError] = []
    for model in (reference(Wire([body], status=status)), lean(Wire([body], status=status))):
        with pytest.raises(ModelHTTPError) as error:
            await streamed(model)
        raised.append(error.value)
    theirs, ours = raised
    assert type(ours) is type(theirs)
    assert (ours.status_code, ours.body, ours.provider_error_code) == (
        theirs.status_code,
        theirs.body,
        theirs.provider_error_code,
    )


def test_tool_schemas_are_customized_once_and_handed_out_as_fresh_copies() -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "default": "Paris"}, "days": {"type": "integer"}},
        "required": ["days"],
        "additionalProperties": False,
    }
    tools = [ToolDefinition(name="forecast", parameters_json_schema=schema, description="Weather.")]
    params = ModelRequestParameters(function_tools=tools, allow_text_output=True)
    model = LeanOpenAIModel("fake/fake-chat", base_url="http://127.0.0.1:9/v1", api_key="k")
    lean_request._CUSTOMIZED_TOOLS.clear()  # pyright: ignore[reportPrivateUsage]
    expected = Model.customize_request_parameters(model, params)
    first = model.customize_request_parameters(params)
    second = model.customize_request_parameters(params)
    assert first.function_tools == second.function_tools == expected.function_tools
    assert len(lean_request._CUSTOMIZED_TOOLS) == 1  # pyright: ignore[reportPrivateUsage]
    first.function_tools[0].parameters_json_schema["properties"]["city"]["type"] = "changed"
    third = model.customize_request_parameters(params)
    assert third.function_tools == expected.function_tools, "a cached schema was shared and changed"
    assert schema["properties"]["city"] == {"type": "string", "default": "Paris"}, "the tool's own schema changed"
    # A different strictness is a different customization.
    strict = [ToolDefinition(name="forecast", parameters_json_schema=schema, description="Weather.", strict=True)]
    strict_params = ModelRequestParameters(function_tools=strict, allow_text_output=True)
    assert (
        model.customize_request_parameters(strict_params).function_tools
        == Model.customize_request_parameters(model, strict_params).function_tools
    )
