"""The per-process figures of the capacity model (docs/scaling.md), measured on one stack.

    .venv/bin/python -P bench/capacity.py [--levels 1,10,30] [--seconds 20] [--chunks 50] [--chunk-delay-ms 20]

The stack is `make run`'s (the launcher as tests start it, embedded PostgreSQL and NATS) with ONE
agent-runner worker, so its figures are one runner's, and the scripted model server
(bench/helpers/soak_model.py) answering every turn with `--chunks` chunks `--chunk-delay-ms` apart
(50 x 20 ms: a turn of about a second, a fast model). At each level, N chats run turns back to
back through the gateway for `--seconds` (a new session every 20 turns, as bench/soak.py). Printed
per level:

- turns per second, and agent-runner's and the gateway's CPU seconds per turn (user + system of the
  process, from /proc): the inverse of the runner's is the turns one runner core completes per
  second while CPU-bound;
- agent-runner's resident memory above its idle figure, divided by the chats in flight: the memory
  of a concurrent turn;
- PostgreSQL connections of every process (pg_stat_activity by application_name), the most seen in
  the samples (every 0.5 s), idle and at the level;
- JetStream messages stored per turn in each stream (the difference of the streams' message counts
  over the turns of the level).

It has no target: it prints what the model in docs/scaling.md is computed from. The machine's other
load moves the CPU figures; read them as orders of magnitude, not to the percent.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import sys
import tempfile
import time
import uuid
from pathlib import Path

import asyncpg
import httpx
import nats
import psutil
import uvloop

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the benchmarks' shared `bench.helpers` (`python -P` leaves bench/ off the path)
sys.path.append(str(REPO / "tests"))  # last, so no test folder shadows a module: tests/support

from bench.helpers.launched_stack import children, environment_of, keep_draining, model_server  # noqa: E402
from popagent_core import subjects, topology  # noqa: E402
from support.launcher import Launched, launch  # noqa: E402

SESSION_TURNS = 20


async def chat_loop(client: httpx.AsyncClient, until: float, done: list[int], failed: list[int]) -> None:
    session = ""
    turns = 0
    while time.monotonic() < until:
        if turns % SESSION_TURNS == 0:
            session = (await client.post("/api/sessions", json={"title": "capacity"})).json()["id"]
        message = {"id": uuid.uuid4().hex, "role": "user", "parts": [{"type": "text", "text": "Go"}]}
        body = bytearray()
        async with client.stream(
            "POST", "/api/chat", json={"id": session, "model": "fake/fake-chat", "message": message}
        ) as response:
            async for chunk in response.aiter_bytes():
                body += chunk
        if response.status_code == 200 and b'"type":"finish"' in body:
            done.append(1)
        else:
            failed.append(1)
        turns += 1


async def stream_counts(stack: Launched) -> dict[str, tuple[int, int]]:
    """(messages, bytes) stored in each JetStream stream, each read as its owner (its NATS user may
    read only its own)."""
    counts: dict[str, tuple[int, int]] = {}
    for service in topology.SERVICES:
        pid = children(stack)[service.name]["pid"]
        url = environment_of(pid, "NATS_URL")
        client = await nats.connect(url, name=service.name, inbox_prefix=subjects.inbox_prefix(service.name))
        try:
            js = client.jetstream(timeout=5)
            streams = [subjects.stream_name(service.subjects_owner)] if service.subjects_owner else []
            if service.name == "agent-runner":
                streams.append(subjects.TURN_LOG_STREAM)
            for stream in streams:
                with contextlib.suppress(Exception):
                    state = (await js.stream_info(stream)).state
                    counts[stream] = (state.messages, state.bytes)
        finally:
            await client.close()
    return counts


async def connections(pool: asyncpg.Pool) -> dict[str, int]:
    rows = await pool.fetch(
        "SELECT application_name, count(*) AS n FROM pg_stat_activity "
        "WHERE datname IS NOT NULL AND pid <> pg_backend_pid() GROUP BY 1"
    )
    return {row["application_name"] or "(none)": row["n"] for row in rows}


async def commits(pool: asyncpg.Pool) -> int:
    """Transactions committed in the application database so far (every process's)."""
    return await pool.fetchval("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")


def cpu_seconds(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def rss_mb(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / 2**20


async def run(args: argparse.Namespace) -> None:
    levels = [int(level) for level in args.levels.split(",")]
    with (
        tempfile.TemporaryDirectory(prefix="popagent-bench-capacity-") as tmp,
        model_server(args.chunks, args.chunk_delay_ms) as model_url,
    ):
        stack = launch(Path(tmp), {"NINEROUTER_URL": model_url, "POPAGENT_AGENT_RUNNER_WORKERS": "1"})
        try:
            await asyncio.to_thread(stack.wait_running, 300)
            keep_draining(stack)
            runner = children(stack)["agent-runner"]["pid"]
            gateway = children(stack)["gateway"]["pid"]
            dsn = environment_of(runner, "DATABASE_URL")
            async with (
                asyncpg.create_pool(dsn, min_size=1, max_size=1) as pool,
                httpx.AsyncClient(base_url=stack.url, headers={"x-popagent-key": stack.api_key}, timeout=120) as client,
            ):
                # One turn first: imports, caches and pools warm, as in a running stack.
                await chat_loop(client, time.monotonic() + 0.01, [], [])
                await asyncio.sleep(2)
                idle_rss = rss_mb(runner)
                idle_connections = await connections(pool)
                print(
                    f"capacity: one agent-runner worker; turns of {args.chunks} chunks {args.chunk_delay_ms:g} ms apart"
                )
                print(f"idle: agent-runner RSS {idle_rss:.0f} MB, gateway RSS {rss_mb(gateway):.0f} MB")
                print(
                    "idle PostgreSQL connections: " + ", ".join(f"{k} {v}" for k, v in sorted(idle_connections.items()))
                )
                for level in levels:
                    streams_before = await stream_counts(stack)
                    cpu_before = (cpu_seconds(runner), cpu_seconds(gateway))
                    commits_before = await commits(pool)
                    done: list[int] = []
                    failed: list[int] = []
                    peak: collections.Counter[str] = collections.Counter()
                    rss_samples: list[float] = []
                    started = time.monotonic()
                    until = started + args.seconds
                    load = asyncio.gather(*(chat_loop(client, until, done, failed) for _ in range(level)))
                    while not load.done():
                        await asyncio.sleep(0.5)
                        for name, count in (await connections(pool)).items():
                            peak[name] = max(peak[name], count)
                        if time.monotonic() < until:
                            rss_samples.append(rss_mb(runner))
                    await load
                    elapsed = time.monotonic() - started
                    turns = len(done)
                    runner_cpu = cpu_seconds(runner) - cpu_before[0]
                    gateway_cpu = cpu_seconds(gateway) - cpu_before[1]
                    streams_after = await stream_counts(stack)
                    # pg_stat_database is updated when a backend reports, at most every second.
                    await asyncio.sleep(1.5)
                    committed = await commits(pool) - commits_before
                    per_turn_rss = (max(rss_samples) - idle_rss) / level if rss_samples else 0.0
                    print(
                        f"\n{level} chats: {turns} turns in {elapsed:.1f} s ({turns / elapsed:.1f}/s), {len(failed)} failed"
                    )
                    if turns:
                        print(
                            f"  CPU per turn: agent-runner {runner_cpu / turns * 1000:.0f} ms "
                            f"({turns / runner_cpu if runner_cpu else 0:.1f} turns/s per runner core while CPU-bound), "
                            f"gateway {gateway_cpu / turns * 1000:.0f} ms"
                        )
                        stored = {
                            stream: tuple(
                                (after - before) / turns
                                for after, before in zip(counts, streams_before.get(stream, (0, 0)), strict=True)
                            )
                            for stream, counts in streams_after.items()
                        }
                        print(
                            "  JetStream per turn (messages, bytes): "
                            + ", ".join(f"{k} {m:.1f} {b:.0f} B" for k, (m, b) in sorted(stored.items()) if m)
                        )
                        print(
                            f"  PostgreSQL transactions per turn (every process's, the sampling's too): {committed / turns:.1f}"
                        )
                    print(
                        f"  agent-runner RSS peak {max(rss_samples, default=0):.0f} MB: {per_turn_rss:.1f} MB per concurrent turn"
                    )
                    print("  PostgreSQL connections (peak): " + ", ".join(f"{k} {v}" for k, v in sorted(peak.items())))
        finally:
            stack.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--levels", default="1,10,30")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--chunks", type=int, default=50)
    parser.add_argument("--chunk-delay-ms", type=float, default=20.0)
    uvloop.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
