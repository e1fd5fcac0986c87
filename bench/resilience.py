"""The concurrency ramp: chats through the whole stack from 10 to 3,200 at once (issue 23; shared
with the resilience issue), counting how every request was answered.

Real processes, started as bench/chat.py starts them (embedded PostgreSQL and NATS, the hooks
service, agent-runner, the gateway behind its connection limits, the scripted model server as its
own process, paced). At each level `N` chats are in flight at once, each running `--turns` turns
back to back, their starts spread over one stream's duration. Printed per level: the answers by
status, whether every 503 carried Retry-After, and time to first token (request sent -> first
`text-delta`) p50/p95 of the turns that streamed. Pass: no 499 at any level, every refusal a 503
with Retry-After, and p95 time to first token at 100 chats printed against this run's 10-chat
baseline (the ratio).

    .venv/bin/python bench/resilience.py [--levels 10,100,200,400,800,1600,3200] [--turns 2]
        [--chunks 200] [--chunk-delay-ms 5]

Takeover (issue 33): `--takeover N` instead kills an agent-runner with SIGKILL N times, each while
a turn it runs streams to a client, and prints how long the client waited from the kill to the
next text of that turn (another runner took it over and ran it again from its prompt); the target
is at most the runner's lease (`--lease-s`, POPAGENT_TURN_LEASE_S) plus one second.

    .venv/bin/python bench/resilience.py --takeover 3 [--lease-s 3]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import resource
import signal
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent))
from chat import API_KEY, MODEL, model_server, runner_address, stack  # pyright: ignore[reportAttributeAccessIssue]

from popagent_dev.launcher import default_runner_workers
from popagent_gateway.runners import rendezvous


@dataclass
class Answer:
    status: int
    retry_after: str | None = None
    ttft: float | None = None


@dataclass
class LevelResult:
    concurrency: int
    answers: list[Answer] = field(default_factory=list)
    wall: float = 0.0


async def read_head(reader: asyncio.StreamReader) -> tuple[int, dict[bytes, bytes]]:
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionError("closed before the status line")
    headers: dict[bytes, bytes] = {}
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers


async def one_turn(host: str, port: int, session: str) -> Answer:
    """One chat turn on its own connection: its status, Retry-After, and time to first token."""
    message = {"id": uuid.uuid4().hex, "role": "user", "parts": [{"type": "text", "text": "Go"}]}
    body = orjson.dumps({"id": session, "model": MODEL, "message": message})
    request = (
        f"POST /api/chat HTTP/1.1\r\nhost: {host}:{port}\r\nx-popagent-key: {API_KEY}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\nconnection: close\r\n\r\n"
    ).encode() + body
    started = time.perf_counter()
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError:
        return Answer(status=0)
    try:
        writer.write(request)
        status, headers = await read_head(reader)
        retry_after = headers.get(b"retry-after")
        if status != 200:
            await reader.read()
            return Answer(status, retry_after.decode() if retry_after else None)
        first: float | None = None
        tail = b""
        while chunk := await reader.read(65536):
            if first is None and b'"type":"text-delta"' in tail + chunk:
                first = time.perf_counter() - started
            tail = chunk[-32:]
        return Answer(status, ttft=first)
    except (ConnectionError, asyncio.IncompleteReadError, ValueError, IndexError):
        return Answer(status=0)
    finally:
        writer.close()


async def run_level(
    host: str, port: int, sessions: list[str], concurrency: int, turns: int, stream_s: float
) -> LevelResult:
    result = LevelResult(concurrency)

    async def chat(index: int) -> None:
        await asyncio.sleep(stream_s * index / concurrency)
        for _ in range(turns):
            result.answers.append(await one_turn(host, port, sessions[index]))

    began = time.perf_counter()
    await asyncio.gather(*(chat(index) for index in range(concurrency)))
    result.wall = time.perf_counter() - began
    return result


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def report(level: LevelResult) -> float | None:
    statuses = collections.Counter(answer.status for answer in level.answers)
    refused = [answer for answer in level.answers if answer.status == 503]
    with_retry = sum(1 for answer in refused if answer.retry_after)
    ttfts = [answer.ttft for answer in level.answers if answer.ttft is not None]
    shown = ", ".join(f"{status or 'no answer'}: {count}" for status, count in sorted(statuses.items()))
    line = f"{level.concurrency:5d} chats  {len(level.answers):5d} turns in {level.wall:6.1f} s  [{shown}]"
    if refused:
        line += f"  503 with Retry-After: {with_retry}/{len(refused)}"
    p95 = None
    if ttfts:
        p95 = percentile(ttfts, 0.95)
        line += f"  TTFT p50 {statistics.median(ttfts) * 1000:6.0f} ms  p95 {p95 * 1000:6.0f} ms"
    print(line, flush=True)
    return p95


async def run(levels: list[int], turns: int, chunks: int, chunk_delay_s: float, runner_workers: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # The bench's connections and the gateway's (it inherits this limit) at the top level.
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 4 * max(levels) + 4096)), hard))
    with tempfile.TemporaryDirectory(prefix="popagent-bench-resilience-") as tmp:
        async with (
            model_server(chunks, chunk_delay_s) as (model_url, _model_pid),
            stack(Path(tmp) / "stack", model_url, runner_workers) as (url, _pids),
        ):
            host, port = url.split("//", 1)[1].split(":")
            async with httpx.AsyncClient(base_url=url, headers={"x-popagent-key": API_KEY}, timeout=60) as client:
                sessions = []
                for _ in range(max(levels)):
                    created = await client.post("/api/sessions", json={"title": "ramp"})
                    created.raise_for_status()
                    sessions.append(created.json()["id"])
            stream_s = chunks * chunk_delay_s
            print(
                f"resilience ramp: {chunks} chunks per answer, {chunk_delay_s * 1000:g} ms apart "
                f"({stream_s:.1f} s per stream), {turns} turns per chat, "
                f"agent-runner as {runner_workers} worker{'s' if runner_workers > 1 else ''}\n"
            )
            await run_level(host, int(port), sessions, min(levels), 1, stream_s)  # warm-up
            p95s: dict[int, float | None] = {}
            cancelled = 0
            unanswered_refusals = 0
            for concurrency in levels:
                level = await run_level(host, int(port), sessions, concurrency, turns, stream_s)
                p95s[concurrency] = report(level)
                cancelled += sum(1 for answer in level.answers if answer.status == 499)
                unanswered_refusals += sum(1 for a in level.answers if a.status == 503 and not a.retry_after)
            print()
            print(f"499 answers: {cancelled} (target 0); 503 without Retry-After: {unanswered_refusals} (target 0)")
            base, hundred = p95s.get(min(levels)), p95s.get(100)
            if base and hundred:
                print(
                    f"p95 time to first token at 100 chats {hundred * 1000:.0f} ms vs {base * 1000:.0f} ms "
                    f"at {min(levels)} chats: {hundred / base:.2f}x"
                )


async def one_takeover(client: httpx.AsyncClient, pid: int, address: str, live: list[str]) -> tuple[float, bool]:
    """Kill the runner at `address` while a turn of a session it runs streams; (seconds from the kill to
    the turn's next text at the client, whether the stream then finished)."""
    while True:
        session = f"takeover-{uuid.uuid4().hex}"
        if rendezvous(session, live)[0] == address:
            break
    (await client.post("/api/sessions", json={"id": session, "title": "takeover"})).raise_for_status()
    message = {"id": uuid.uuid4().hex, "role": "user", "parts": [{"type": "text", "text": "Go"}]}
    body = {"id": session, "model": MODEL, "message": message}
    killed_at = 0.0
    waited = -1.0
    finished = False
    async with client.stream("POST", "/api/chat", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: {"):
                continue
            kind = orjson.loads(line.removeprefix("data: "))["type"]
            if kind == "text-delta" and not killed_at:
                os.kill(pid, signal.SIGKILL)
                killed_at = time.perf_counter()
            elif kind == "start" and killed_at:
                waited = 0.0  # the turn began again; its next text is what the client waited for
            elif kind == "text-delta" and waited == 0.0:
                waited = time.perf_counter() - killed_at
            elif kind == "finish":
                finished = True
    return waited, finished


async def takeover(rounds: int, lease_s: float, chunks: int, chunk_delay_s: float) -> None:
    with tempfile.TemporaryDirectory(prefix="popagent-bench-takeover-") as tmp:
        async with (
            model_server(chunks, chunk_delay_s) as (model_url, _model_pid),
            stack(Path(tmp) / "stack", model_url, rounds + 1, runner_env={"POPAGENT_TURN_LEASE_S": f"{lease_s:g}"}) as (
                url,
                pids,
            ),
            httpx.AsyncClient(base_url=url, headers={"x-popagent-key": API_KEY}, timeout=120) as client,
        ):
            runners = {runner_address(pid): pid for name, pid in pids.items() if name.startswith("agent-runner-")}
            print(
                f"takeover: {rounds} runners killed with SIGKILL mid-answer, one at a time, out of {len(runners)}; "
                f"lease {lease_s:g} s; target: the turn's next text within {lease_s + 1:g} s of the kill\n"
            )
            waits: list[float] = []
            for number in range(1, rounds + 1):
                address, pid = next(iter(runners.items()))
                waited, finished = await one_takeover(client, pid, address, list(runners))
                del runners[address]
                waits.append(waited)
                shown = f"{waited:.2f} s" if waited >= 0 else "never"
                print(f"kill {number}: next text after {shown}; stream finished: {finished}", flush=True)
            print(f"\nworst: {max(waits):.2f} s (target <= {lease_s + 1:g} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", default="10,100,200,400,800,1600,3200")
    parser.add_argument("--turns", type=int, default=2)
    parser.add_argument("--chunks", type=int, default=200)
    parser.add_argument("--chunk-delay-ms", type=float, default=5.0)
    parser.add_argument(
        "--runner-workers", type=int, default=default_runner_workers(), help="agent-runner worker processes"
    )
    parser.add_argument("--takeover", type=int, default=0, help="kill this many runners mid-turn instead of the ramp")
    parser.add_argument("--lease-s", type=float, default=3.0, help="the runners' turn lease (with --takeover)")
    args = parser.parse_args()
    if args.takeover:
        # Each answer streams long enough (8 s by default) to outlast the kill and the lease.
        chunks = args.chunks if args.chunks != 200 else 400
        delay_s = args.chunk_delay_ms / 1000 if args.chunk_delay_ms != 5.0 else 0.02
        uvloop.run(takeover(args.takeover, args.lease_s, chunks, delay_s))
        return
    levels = [int(level) for level in args.levels.split(",")]
    uvloop.run(run(levels, args.turns, args.chunks, args.chunk_delay_ms / 1000, args.runner_workers))


if __name__ == "__main__":
    main()
