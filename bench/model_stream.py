"""Client CPU per streamed chunk: raw httpx + orjson against pydantic-ai's `OpenAIChatModel` and our `LeanOpenAIModel`.

Every consumer reads the same scripted answer (800 chunks of 4 characters, with usage) from one
scripted model gateway running in a separate process, so only the client's CPU is counted
(`time.process_time()` in this process). Consumers take turns, round by round, so drift in the
machine's speed hits them alike. The baseline is raw httpx reading the SSE and decoding each event
with orjson. Target (docs/decisions/lean-model-transport.md): the lean model's per-chunk CPU within ~3x of the baseline and far
below `OpenAIChatModel`'s.

    .venv/bin/python bench/model_stream.py [--rounds 10] [--chunks 800] [--chunk-delay-ms 0] [--uvloop]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
from pydantic_ai import Agent
from pydantic_ai.direct import model_request_stream
from pydantic_ai.messages import ModelRequest, UserPromptPart
from pydantic_ai.models import Model
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai_compatible import OpenAICompatibleProvider

from popagent_agent_runner.llm.model import LeanOpenAIModel, streaming_to
from popagent_dev.embedded import free_port

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the benchmarks' shared `bench.helpers` (`python -P` leaves bench/ off the path)

from bench.helpers.completions import streamed_go  # noqa: E402

API_KEY = "sk-bench"
MODEL = "fake/fake-chat"


@asynccontextmanager
async def gateway_process(chunks: int, chunk_delay_s: float) -> AsyncIterator[str]:
    """The scripted gateway (tests/support/model_gateway.py) as its own process, answering one turn forever."""
    text = "".join(f"{n % 1000:03d} " for n in range(chunks))
    turn = {"text": text, "chunk_size": 4, "chunk_delay_s": chunk_delay_s}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as script:
        json.dump({"turns": [turn], "loop": True, "api_key": API_KEY}, script)
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO / "tests")}
    command = [sys.executable, "-m", "support.model_gateway", "--port", str(port), "--script", script.name]
    process = await asyncio.create_subprocess_exec(*command, "--no-record", env=env, stdout=subprocess.PIPE)
    try:
        assert process.stdout is not None
        line = (await process.stdout.readline()).decode()
        if "listening on" not in line:
            raise RuntimeError(f"model gateway did not start: {line!r}")
        yield line.rsplit(" ", 1)[-1].strip()
    finally:
        process.terminate()
        await process.wait()
        os.unlink(script.name)


class CountingSink:
    """The turn's sink as cheap as it can be: what the benchmark charges the model for is the call itself."""

    def __init__(self) -> None:
        self.deltas = 0

    def text_delta(self, index: int, delta: str) -> None:
        self.deltas += 1

    def thinking_delta(self, index: int, delta: str) -> None:
        self.deltas += 1


@dataclass
class Consumer:
    name: str
    run_turn: Callable[[], Awaitable[int]]  # returns the characters of text it received
    cpu: float = 0.0
    wall: float = 0.0
    turns: int = 0
    events: list[int] = field(default_factory=list[int])


def raw_httpx(url: str, client: httpx.AsyncClient) -> Callable[[], Awaitable[int]]:
    body = streamed_go(MODEL)
    headers = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"}

    async def turn() -> int:
        received = 0
        buffer = b""
        async with client.stream("POST", url + "/chat/completions", content=body, headers=headers) as response:
            async for raw in response.aiter_bytes():
                buffer += raw
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if not line.startswith(b"data: ") or line == b"data: [DONE]":
                        continue
                    chunk = orjson.loads(line[6:])
                    for choice in chunk.get("choices") or ():
                        content = choice["delta"].get("content")
                        if content:
                            received += len(content)
        return received

    return turn


def model_stream(model: Model, events: list[int], sink: CountingSink | None) -> Callable[[], Awaitable[int]]:
    messages = [ModelRequest(parts=[UserPromptPart("Go")])]

    async def turn() -> int:
        count = 0
        with streaming_to(sink):
            async with model_request_stream(model, messages) as stream:
                async for _ in stream:
                    count += 1
                response = stream.get()
        events.append(count)
        return len(response.text or "")

    return turn


def agent_run(model: Model, events: list[int], sink: CountingSink | None) -> Callable[[], Awaitable[int]]:
    agent = Agent(model)

    seen: list[int] = []

    async def handler(_ctx: Any, stream: AsyncIterable[Any]) -> None:
        # Called once per step of the run (the model's response, then the tool calls, if any).
        async for _ in stream:
            seen.append(1)

    async def turn() -> int:
        seen.clear()
        with streaming_to(sink):
            result = await agent.run("Go", event_stream_handler=handler)
        events.append(len(seen))
        return len(result.output)

    return turn


async def measure(rounds: int, chunks: int, chunk_delay_s: float) -> None:
    async with gateway_process(chunks, chunk_delay_s) as url:
        client = httpx.AsyncClient(timeout=60)
        reference = OpenAIChatModel(
            MODEL, provider=OpenAICompatibleProvider("ninerouter", base_url=url, api_key=API_KEY)
        )
        lean = LeanOpenAIModel(MODEL, base_url=url, api_key=API_KEY)
        consumers: list[Consumer] = []

        def add(name: str, factory: Callable[[list[int]], Callable[[], Awaitable[int]]]) -> None:
            events: list[int] = []
            consumers.append(Consumer(name, factory(events), events=events))

        add("raw httpx + orjson (baseline)", lambda _events: raw_httpx(url, client))
        add("OpenAIChatModel.request_stream", lambda events: model_stream(reference, events, None))
        add("LeanOpenAIModel.request_stream", lambda events: model_stream(lean, events, CountingSink()))
        add("Agent.run + handler, OpenAIChatModel", lambda events: agent_run(reference, events, None))
        add("Agent.run + handler, LeanOpenAIModel", lambda events: agent_run(lean, events, CountingSink()))

        expected = chunks * 4
        for consumer in consumers:  # warm-up: connections, imports, caches
            for _ in range(2):
                got = await consumer.run_turn()
                assert got == expected, f"{consumer.name} received {got} characters, expected {expected}"
            consumer.events.clear()
        for _ in range(rounds):
            for consumer in consumers:
                wall, cpu = time.perf_counter(), time.process_time()
                got = await consumer.run_turn()
                consumer.cpu += time.process_time() - cpu
                consumer.wall += time.perf_counter() - wall
                consumer.turns += 1
                assert got == expected, f"{consumer.name} received {got} characters, expected {expected}"
        await client.aclose()
        await lean.aclose()
        await reference.client.close()

    per_chunk = {c.name: c.cpu / (c.turns * chunks) * 1e6 for c in consumers}
    baseline = per_chunk[consumers[0].name]
    pacing = f", {chunk_delay_s * 1000:g} ms apart" if chunk_delay_s else ", as fast as the server writes"
    print(f"client CPU per streamed chunk: {chunks} chunks of 4 characters per turn{pacing}, {rounds} turns each")
    print(f"{'consumer':<40} {'µs/chunk':>9} {'x base':>7} {'ms/turn wall':>13} {'events/turn':>12}")
    for consumer in consumers:
        events = f"{sum(consumer.events) / len(consumer.events):.0f}" if consumer.events else "-"
        print(
            f"{consumer.name:<40} {per_chunk[consumer.name]:9.1f} {per_chunk[consumer.name] / baseline:7.2f}"
            f" {consumer.wall / consumer.turns * 1000:13.1f} {events:>12}"
        )
    lean_ratio = per_chunk["LeanOpenAIModel.request_stream"] / baseline
    reference_ratio = per_chunk["OpenAIChatModel.request_stream"] / per_chunk["LeanOpenAIModel.request_stream"]
    agent_ratio = per_chunk["Agent.run + handler, OpenAIChatModel"] / per_chunk["Agent.run + handler, LeanOpenAIModel"]
    print(f"lean model vs baseline: {lean_ratio:.2f}x (target <= ~3x)")
    print(f"OpenAIChatModel vs lean model: {reference_ratio:.1f}x; in an Agent.run: {agent_ratio:.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description="Client CPU per streamed chunk of the model streaming paths.")
    parser.add_argument("--rounds", type=int, default=10, help="measured turns per consumer")
    parser.add_argument("--chunks", type=int, default=800, help="text chunks of 4 characters per turn")
    parser.add_argument("--chunk-delay-ms", type=float, default=0.0, help="pause between chunks (paced streaming)")
    parser.add_argument("--uvloop", action="store_true", help="run the client on uvloop, as the services do")
    args = parser.parse_args()
    run = measure(args.rounds, args.chunks, args.chunk_delay_ms / 1000)
    if args.uvloop:
        import uvloop

        uvloop.run(run)
    else:
        asyncio.run(run)


if __name__ == "__main__":
    main()
