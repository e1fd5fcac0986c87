"""The streaming trick (docs/decisions/lean-model-transport.md): every delta reaches the turn's sink at once, pydantic-ai gets merged
deltas, and what the sink showed is exactly what pydantic-ai assembled."""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from model_twins import API_KEY, MODEL, lean_model, model_at, reference_model
from pydantic_ai import Agent
from pydantic_ai.direct import model_request, model_request_stream
from pydantic_ai.messages import (
    AgentStreamEvent,
    FinalResultEvent,
    FunctionToolCallEvent,
    FunctionToolResultEvent,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    PartDeltaEvent,
    PartEndEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models import Model
from pydantic_ai.usage import RequestUsage

from popagent_agent_runner.llm.model import (
    DROP_TEXT,
    LeanModels,
    LeanOpenAIModel,
    current_turn_sink,
    is_estimated,
    streaming_to,
)
from popagent_agent_runner.llm.transport import LeanTransport
from popagent_agent_runner.turn.agent_runs import run_agent
from support.model_gateway import ModelGateway, ToolCall, Turn, Usage
from support.waiting import eventually


@dataclass
class RecordingSink:
    """A `TurnSink` that keeps every delta with the time it arrived."""

    text: list[tuple[int, str, float]] = field(default_factory=list[tuple[int, str, float]])
    thinking: list[tuple[int, str, float]] = field(default_factory=list[tuple[int, str, float]])

    def text_delta(self, index: int, delta: str) -> None:
        self.text.append((index, delta, time.monotonic()))

    def thinking_delta(self, index: int, delta: str) -> None:
        self.thinking.append((index, delta, time.monotonic()))

    def text_of(self, index: int) -> str:
        return "".join(delta for i, delta, _ in self.text if i == index)


def text_of(response: ModelResponse, index: int) -> str:
    part = response.parts[index]
    assert isinstance(part, TextPart)
    return part.content


async def stream_once(model: Model, sink: RecordingSink | None = None) -> tuple[ModelResponse, list[tuple[Any, float]]]:
    """One streamed request of the user prompt "Go", with each event and when it was handed over."""
    events: list[tuple[Any, float]] = []
    with streaming_to(sink):
        async with model_request_stream(model, [ModelRequest(parts=[UserPromptPart("Go")])]) as stream:
            async for event in stream:
                events.append((event, time.monotonic()))
            return stream.get(), events


async def test_800_chunks_reach_the_sink_one_by_one_and_pydantic_ai_merged() -> None:
    text = "".join(f"{n:03d} " for n in range(800))  # 800 chunks of 4 characters
    async with ModelGateway([Turn.say(text, chunk_size=4)], api_key=API_KEY) as gw, model_at("lean", gw.url) as model:
        sink = RecordingSink()
        response, events = await stream_once(model, sink)
    assert len(sink.text) == 800
    assert [delta for _, delta, _ in sink.text] == [text[i : i + 4] for i in range(0, len(text), 4)]
    assert sink.text_of(0) == text_of(response, 0) == text
    text_events = [e for e, _ in events if isinstance(e, PartStartEvent | PartDeltaEvent)]
    first = text_events[0]
    assert isinstance(first, PartStartEvent) and isinstance(first.part, TextPart) and first.part.content == "000 "
    assert len(text_events) < 100, f"{len(text_events)} pydantic-ai events for 800 chunks"


async def test_the_first_token_and_slow_tokens_are_not_held_back() -> None:
    # 120 ms between chunks, far above the 20 ms merge window: nothing waits for a batch.
    script = [Turn.say("one two three four ", chunk_size=4, chunk_delay_s=0.12)]
    async with ModelGateway(script, api_key=API_KEY) as gw, model_at("lean", gw.url) as model:
        sink = RecordingSink()
        started = time.monotonic()
        response, events = await stream_once(model, sink)
        finished = time.monotonic()
    assert len(sink.text) == 5
    first_delta_at = sink.text[0][2]
    assert first_delta_at - started < 0.1, "the first token waited"
    assert finished - first_delta_at > 0.4
    gaps = [later[2] - earlier[2] for earlier, later in zip(sink.text, sink.text[1:], strict=False)]
    assert min(gaps) > 0.08, f"deltas arrived in bursts: {gaps}"
    # pydantic-ai gets each of them at once too, as each arrives after the window.
    deltas = [(e, at) for e, at in events if isinstance(e, PartStartEvent | PartDeltaEvent)]
    assert len(deltas) == 5
    assert deltas[0][1] - started < 0.1
    assert sink.text_of(0) == text_of(response, 0)


async def test_pending_text_is_handed_over_before_a_tool_call_starts() -> None:
    script = [
        Turn.call(ToolCall("lookup", {"q": "x" * 40}, id="call_1"), text="I will look that up now. " * 8, chunk_size=2)
    ]
    async with ModelGateway(script, api_key=API_KEY) as gw, model_at("lean", gw.url) as model:
        sink = RecordingSink()
        response, events = await stream_once(model, sink)
    kinds = [type(e).__name__ for e, _ in events]
    tool_start = next(
        i for i, (e, _) in enumerate(events) if isinstance(e, PartStartEvent) and isinstance(e.part, ToolCallPart)
    )
    text_deltas = [i for i, (e, _) in enumerate(events) if isinstance(e, PartDeltaEvent) and e.index == 0]
    assert text_deltas and max(text_deltas) < tool_start, kinds
    assert isinstance(events[tool_start - 1][0], PartEndEvent) and events[tool_start - 1][0].index == 0
    assert sink.text_of(0) == text_of(response, 0) == "I will look that up now. " * 8
    assert isinstance(response.parts[1], ToolCallPart) and response.parts[1].args_as_dict() == {"q": "x" * 40}
    assert {i for i, _, _ in sink.text} == {0}, "tool arguments are not text"


async def test_a_joiner_inside_a_special_token_is_removed_for_the_sink_as_for_pydantic_ai() -> None:
    # pydantic-ai breaks special tokens with a zero-width joiner on the way out and removes one the
    # model copies back on the way in; the sink must show the restored text, not the wire's.
    text = "Quote: <\u200d|im_start|>system and a lone \u200d joiner, then <\u200d|im_end|>."
    async with ModelGateway([Turn.say(text, chunk_size=1)], api_key=API_KEY) as gw:
        async with model_at("lean", gw.url) as model:
            sink = RecordingSink()
            response, _ = await stream_once(model, sink)
        async with model_at("reference", gw.url) as reference:
            gw.push(Turn.say(text, chunk_size=3))
            reference_response, _ = await stream_once(reference)
    restored = text_of(response, 0)
    assert restored == "Quote: <|im_start|>system and a lone \u200d joiner, then <|im_end|>."
    assert restored == text_of(reference_response, 0)
    assert sink.text_of(0) == restored


async def test_an_agent_run_forwards_through_the_context_sink_and_assembles_the_same_text() -> None:
    answer = "".join(f"token{n} " for n in range(300))
    script = [Turn.call(ToolCall("get_time", {"tz": "UTC"}, id="c1")), Turn.say(answer, chunk_size=3)]
    async with ModelGateway(script, api_key=API_KEY) as gw, model_at("lean", gw.url) as model:
        agent = Agent(model)

        @agent.tool_plain
        def get_time(tz: str) -> str:
            assert current_turn_sink() is sink  # tools run inside the turn's context
            return "noon"

        handled: list[AgentStreamEvent] = []

        async def handler(_ctx: Any, stream: AsyncIterable[AgentStreamEvent]) -> None:
            async for event in stream:
                handled.append(event)

        sink = RecordingSink()
        with streaming_to(sink):
            result = await agent.run("Time?", event_stream_handler=handler)
    assert result.output == answer
    last = result.all_messages()[-1]
    assert isinstance(last, ModelResponse)
    assert sink.text_of(0) == answer
    assert len(sink.text) == len(range(0, len(answer), 3))
    assert any(isinstance(e, FinalResultEvent) for e in handled)
    merged = [e for e in handled if isinstance(e, PartDeltaEvent) and isinstance(e.delta, TextPartDelta)]
    assert len(merged) < len(sink.text) // 4


async def test_no_sink_outside_a_turn_and_none_inside_streaming_to_none() -> None:
    script = [Turn.say("hello there"), Turn.say("again")]
    async with ModelGateway(script, api_key=API_KEY) as gw, model_at("lean", gw.url) as model:
        outer = RecordingSink()
        with streaming_to(outer):
            with streaming_to(None):
                assert current_turn_sink() is None
                response, _ = await stream_once(model)
            assert current_turn_sink() is outer
        assert current_turn_sink() is None
        second, _ = await stream_once(model, outer)
    assert text_of(response, 0) == "hello there"
    assert outer.text_of(0) == text_of(second, 0) == "again"


async def test_9router_double_done_and_estimated_usage_keep_the_last_usage() -> None:
    usage = Usage(prompt_tokens=50, completion_tokens=9)
    script = [Turn.say("fine", double_done=True, estimated_usage_in_finish=True, usage=usage)] * 2
    async with ModelGateway(script, api_key=API_KEY) as gw:
        async with model_at("lean", gw.url) as model:
            response, _ = await stream_once(model)
        async with model_at("reference", gw.url) as reference:
            reference_response, _ = await stream_once(reference)
    assert response.usage == RequestUsage(input_tokens=50, output_tokens=9)
    assert not is_estimated(response.usage)
    # pydantic-ai's own model adds the estimate (50+7, 9+3, marked estimated) to the real figures.
    assert reference_response.usage == RequestUsage(input_tokens=107, output_tokens=21, details={"estimated": 1})
    assert text_of(response, 0) == "fine" and response.finish_reason == "stop"


async def test_a_request_whose_text_is_dropped_still_streams_for_the_real_usage_behind_9router() -> None:
    script = [Turn.say("fine", usage=Usage(prompt_tokens=40, completion_tokens=5))] * 2
    prompt: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart("Go")])]
    async with ModelGateway(script, api_key=API_KEY, ninerouter_usage=True) as gw, model_at("lean", gw.url) as model:
        unstreamed = await model_request(model, prompt)
        with streaming_to(DROP_TEXT):
            streamed = await model_request(model, prompt)
    assert [request["stream"] for request in gw.requests] == [False, True]
    # 9Router's non-streamed figure is the upstream's plus 2000; its stream ends with the upstream's own.
    assert unstreamed.usage.input_tokens == 2040
    assert streamed.usage == RequestUsage(input_tokens=40, output_tokens=5)
    assert text_of(streamed, 0) == "fine"


async def test_an_estimate_with_no_real_usage_after_it_stays_marked_estimated() -> None:
    script = [Turn.say("fine", usage=Usage(prompt_tokens=50, completion_tokens=9), usage_chunk=False)]
    async with ModelGateway(script, api_key=API_KEY, ninerouter_usage=True) as gw, model_at("lean", gw.url) as model:
        response, _ = await stream_once(model)
    # The finish chunk's estimate (50+7, 9+3) is all there is.
    assert (response.usage.input_tokens, response.usage.output_tokens) == (57, 12)
    assert is_estimated(response.usage)


async def test_a_keep_alive_connection_serves_turn_after_turn() -> None:
    # `[DONE]` twice, then the next turn on the same pooled connection: the body was drained.
    script = [Turn.say(f"turn {n}", double_done=True) for n in range(5)]
    async with ModelGateway(script, api_key=API_KEY) as gw:
        model: LeanOpenAIModel = lean_model(gw.url)
        try:
            texts = [text_of((await stream_once(model))[0], 0) for _ in range(5)]
            pool = model._client._transport._pool  # pyright: ignore[reportAttributeAccessIssue, reportPrivateUsage]
            connections = len(pool.connections)
        finally:
            await model.aclose()
    assert texts == [f"turn {n}" for n in range(5)]
    assert connections == 1


async def test_the_model_id_and_reference_stream_shapes_match() -> None:
    # A provider-prefixed id goes out unchanged and comes back as the response's model name.
    async with ModelGateway([Turn.say("ok")] * 2, api_key=API_KEY) as gw:
        async with model_at("lean", gw.url, "cx/gpt-5.2-codex") as model:
            response, _ = await stream_once(model)
        async with reference_model(gw.url, "cx/gpt-5.2-codex") as reference:
            reference_response, _ = await stream_once(reference)
    assert gw.requests[0]["model"] == gw.requests[1]["model"] == "cx/gpt-5.2-codex"
    assert response.model_name == reference_response.model_name == "cx/gpt-5.2-codex"
    assert response.model_name != MODEL


@pytest.mark.parametrize("driven_by", ["agent.run streamed", "run_agent"])
async def test_cancelling_the_turn_stops_the_stream_and_is_not_translated(driven_by: str) -> None:
    # Both ways an agent reads the lean model: pydantic-ai's own streaming, and a turn's
    # `run_agent` (unstreamed for pydantic-ai, the stream read inside `request()`).
    script = [Turn.say("word " * 400, chunk_size=5, chunk_delay_s=0.01)]
    async with ModelGateway(script, api_key=API_KEY) as gw, model_at("lean", gw.url) as model:
        first_token = asyncio.Event()

        class SignallingSink(RecordingSink):
            def text_delta(self, index: int, delta: str) -> None:
                super().text_delta(index, delta)
                first_token.set()

        sink = SignallingSink()

        async def turn() -> None:
            with streaming_to(sink):
                if driven_by == "run_agent":
                    await run_agent(Agent(model), "Talk.", tool_events=lambda stream: drain(None, stream))
                else:
                    await Agent(model).run("Talk.", event_stream_handler=drain)

        task = asyncio.create_task(turn())
        await asyncio.wait_for(first_token.wait(), 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The server notices the closed connection on its next write.
        await eventually(lambda: gw.disconnected, within=2, interval=0.02, what="the server to notice")
    assert gw.disconnected == 1
    assert 0 < len(sink.text) < 400


async def drain(_ctx: Any, stream: AsyncIterable[AgentStreamEvent]) -> None:
    async for _ in stream:
        pass


async def test_a_cancelled_stream_reports_an_interrupted_response() -> None:
    script = [Turn.say("word " * 200, chunk_size=5, chunk_delay_s=0.01)]
    async with ModelGateway(script, api_key=API_KEY) as gw, model_at("lean", gw.url) as model:
        messages = [ModelRequest(parts=[UserPromptPart("Go")])]
        async with model_request_stream(model, messages) as stream:
            seen = 0
            async for _ in stream:
                seen += 1
                if seen == 3:
                    await stream.cancel()
            response = stream.get()
    assert response.state == "interrupted"
    assert text_of(response, 0).startswith("word word")
    assert len(text_of(response, 0)) < len("word " * 200)


def test_preloading_lean_models_loads_the_pricing_data_a_first_model_would_and_keeps_no_model() -> None:
    # A fresh interpreter: this one may have built a model already.
    script = (
        "import asyncio\n"
        "from genai_prices import data_snapshot\n"
        "from popagent_agent_runner.llm.model import LeanModels\n"
        "async def main():\n"
        "    async with LeanModels('http://127.0.0.1:9/v1', 'k') as models:\n"
        "        loaded = data_snapshot._bundled_snapshot.cache_info().currsize\n"
        "        models.preload()\n"
        "        print(loaded, data_snapshot._bundled_snapshot.cache_info().currsize, len(models._models))\n"
        "asyncio.run(main())\n"
    )
    printed = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True).stdout
    assert printed.split() == ["0", "1", "0"]


async def test_lean_models_share_one_pool_across_model_ids() -> None:
    script = [Turn.say("one"), Turn.say("two"), Turn.say("three")]
    async with ModelGateway(script, api_key=API_KEY) as gw:
        async with LeanModels(gw.url, API_KEY) as models:
            assert models.get("fake/fake-chat") is models.get("fake/fake-chat")
            texts = [
                text_of((await stream_once(models.get(name)))[0], 0)
                for name in ("fake/fake-chat", "qwen3.5-4b", "fake/fake-chat")
            ]
            pool = models._client._transport._pool  # pyright: ignore[reportAttributeAccessIssue, reportPrivateUsage]
            connections = len(pool.connections)
        assert models._client.is_closed  # pyright: ignore[reportPrivateUsage]
    assert texts == ["one", "two", "three"]
    assert [r["model"] for r in gw.requests] == ["fake/fake-chat", "qwen3.5-4b", "fake/fake-chat"]
    assert connections == 1


# -- `request()` inside a turn: streamed from the server, one finished response for pydantic-ai ----------


async def test_a_request_inside_a_turn_streams_to_the_sink_and_answers_the_streamed_response() -> None:
    text = "".join(f"{n:03d} " for n in range(200))
    usage = Usage(prompt_tokens=12, completion_tokens=200)
    script = [Turn.say(text, chunk_size=4, usage=usage)] * 2
    async with ModelGateway(script, api_key=API_KEY) as gw, model_at("lean", gw.url) as model:
        sink = RecordingSink()
        with streaming_to(sink):
            response = await model_request(model, [ModelRequest(parts=[UserPromptPart("Go")])])
        streamed, _ = await stream_once(model)
    assert gw.requests[0]["stream"] is True and gw.requests[0] == gw.requests[1]
    assert [delta for _, delta, _ in sink.text] == [text[i : i + 4] for i in range(0, len(text), 4)]
    assert text_of(response, 0) == sink.text_of(0) == text
    # What pydantic-ai is answered is what its own streaming would have assembled.
    assert response.parts == streamed.parts
    assert response.usage == streamed.usage == RequestUsage(input_tokens=12, output_tokens=200)
    assert (response.finish_reason, response.model_name) == (streamed.finish_reason, streamed.model_name)


async def test_a_request_outside_a_turn_is_not_streamed() -> None:
    async with ModelGateway([Turn.say("plain")], api_key=API_KEY) as gw, model_at("lean", gw.url) as model:
        with streaming_to(None):
            response = await model_request(model, [ModelRequest(parts=[UserPromptPart("Go")])])
    assert "stream" not in gw.requests[0] or gw.requests[0]["stream"] is False
    assert text_of(response, 0) == "plain"


async def test_run_agent_streams_tool_events_only_and_the_text_to_the_sink() -> None:
    answer = "".join(f"token{n} " for n in range(100))
    script = [Turn.call(ToolCall("get_time", {"tz": "UTC"}, id="c1")), Turn.say(answer, chunk_size=3)]
    async with ModelGateway(script, api_key=API_KEY) as gw, model_at("lean", gw.url) as model:
        agent = Agent(model)

        @agent.tool_plain
        def get_time(tz: str) -> str:
            return f"noon {tz}"

        handled: list[AgentStreamEvent] = []
        streamed_steps: list[int] = []

        async def tool_events(stream: AsyncIterable[AgentStreamEvent]) -> None:
            streamed_steps.append(len(handled))
            async for event in stream:
                handled.append(event)

        sink = RecordingSink()
        with streaming_to(sink):
            result = await run_agent(agent, "Time?", tool_events=tool_events)
    assert result.output == answer == sink.text_of(0)
    assert all(request["stream"] is True for request in gw.requests)
    # Only the tool step was streamed: its call and its result, nothing of the model's responses;
    # the step of the text answer, which has no tool calls, was not streamed at all.
    assert streamed_steps == [0]
    assert [type(e).__name__ for e in handled] == ["FunctionToolCallEvent", "FunctionToolResultEvent"]
    call, outcome = handled
    assert isinstance(call, FunctionToolCallEvent) and call.part.args_as_dict() == {"tz": "UTC"}
    assert isinstance(outcome, FunctionToolResultEvent) and outcome.part.content == "noon UTC"
    assert [type(m).__name__ for m in result.new_messages()] == [
        "ModelRequest",
        "ModelResponse",
        "ModelRequest",
        "ModelResponse",
    ]


async def test_run_agent_events_a_handler_leaves_unread_are_drained() -> None:
    script = [Turn.call(ToolCall("get_time", {"tz": "UTC"}, id="c1")), Turn.say("done")]
    async with ModelGateway(script, api_key=API_KEY) as gw, model_at("lean", gw.url) as model:
        agent = Agent(model)
        ran: list[str] = []

        @agent.tool_plain
        def get_time(tz: str) -> str:
            ran.append(tz)
            return "noon"

        async def ignore(stream: AsyncIterable[AgentStreamEvent]) -> None:
            return None

        result = await run_agent(agent, "Time?", tool_events=ignore)
    assert ran == ["UTC"] and result.output == "done"


async def test_reads_are_paced_from_the_first_text_on_and_reasoning_before_it_is_not() -> None:
    # Hand-written SSE: 6 reasoning deltas then 12 text deltas, 30 ms apart. The sink forwards every
    # 0.2 s, so from the first text on the body may be read that seldom; reasoning before it is not
    # paced, so the answer's first token does not wait for an interval.
    def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
        chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": MODEL}
        chunk["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish}]
        return b"data: " + json.dumps(chunk).encode() + b"\n\n"

    deltas = [{"reasoning_content": f"r{n} "} for n in range(6)] + [{"content": f"t{n} "} for n in range(12)]

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(
            next(line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")).split(b":")[1]
        )
        await reader.readexactly(length)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        for delta in deltas:
            body = event(delta)
            writer.write(f"{len(body):x}\r\n".encode() + body + b"\r\n")
            await writer.drain()
            await asyncio.sleep(0.03)
        for body in (event({}, "stop"), b"data: [DONE]\n\n"):
            writer.write(f"{len(body):x}\r\n".encode() + body + b"\r\n")
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    class PacedSink(RecordingSink):
        forward_interval_s = 0.2

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    http = httpx.AsyncClient(transport=LeanTransport(), timeout=None)
    model = LeanOpenAIModel(MODEL, base_url=f"http://127.0.0.1:{port}/v1", api_key=API_KEY, http_client=http)
    sink = PacedSink()
    try:
        with streaming_to(sink):
            response = await model_request(model, [ModelRequest(parts=[UserPromptPart("Go")])])
    finally:
        await http.aclose()
        server.close()
    thinking = [at for _, _, at in sink.thinking]
    text = [at for _, _, at in sink.text]
    assert "".join(d for _, d, _ in sink.text) == text_of(response, 1) == "".join(f"t{n} " for n in range(12))
    assert max(b - a for a, b in itertools.pairwise(thinking)) < 0.15, "reasoning was paced"
    assert text[0] - thinking[-1] < 0.15, "the first text token waited for a paced read"
    # From the first text on, deltas arrive together (one group per paced read), not one by one
    # 30 ms apart as they were sent.
    arrivals = 1 + sum(1 for a, b in itertools.pairwise(text) if b - a > 0.01)
    assert arrivals <= 4, f"12 text deltas arrived in {arrivals} groups"
