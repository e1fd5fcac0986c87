"""Evolution: signal ingestion against raw JetStream consumption, and the apply transaction against a bare insert.

    .venv/bin/python bench/evolution.py [--events 2000] [--applies 300]

Uses DATABASE_URL when set (in a scratch database it creates and drops), else an embedded
PostgreSQL in a temporary folder, and an embedded NATS with JetStream either way.

- Ingestion: `--events` failing-turn outcome events are published to the agent-runner stream
  once. A durable consumer whose batch handler does nothing (`bus.consume_batches`, fetch
  and ack of every message, the loop evolution's consumer runs) gives the raw consume rate;
  then evolution's own batch handler (parse, redact, bound, one `INSERT … ON CONFLICT DO
  NOTHING` per fetched batch) consumes the same events through a second durable. Both print events per second; the ratio is signals/s over raw.
- Apply: one claimed signal per round, applied with a one-strategy proposal by
  `LearnedStore.apply` (lock and reread the autonomy row, lock the claimed signal, render and
  check the overlay section, upsert the overlay, append the revision, settle the signal,
  enqueue the outbox event) against one bare insert of a signal-shaped row in a plain table,
  interleaved. Prints p50/p99 in microseconds and the p50 ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import secrets
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from nats.aio.msg import Msg

from popagent.events.v1 import events_pb2
from popagent_core import bus, subjects
from popagent_core.db import open_pool
from popagent_core.migrate import migrate
from popagent_dev import embedded
from popagent_evolution.ingest import outcome_handler
from popagent_evolution.learned import LearnedStore
from popagent_evolution.reflection import Reflection, Selection
from popagent_evolution.service import MIGRATIONS
from popagent_evolution.signals import SignalRepo
from popagent_evolution.strategies import Strategy

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the benchmarks' shared `bench.helpers` (`python -P` leaves bench/ off the path)

from bench.helpers.databases import scratch_database  # noqa: E402

BARE_SCHEMA = """
CREATE TABLE bench_bare (
    id uuid PRIMARY KEY, trace_id text NOT NULL, agent_id text NOT NULL, failure_class text NOT NULL,
    goal text NOT NULL, evidence text NOT NULL, status text NOT NULL, created_at timestamptz NOT NULL DEFAULT now()
)
"""
BARE_INSERT = (
    "INSERT INTO bench_bare (id, trace_id, agent_id, failure_class, goal, evidence, status)"
    " VALUES ($1, $2, $3, $4, $5, $6, 'pending')"
)
GOAL = "summarize the quarterly report and list the open risks"
EVIDENCE = "The model provider rejected the request: the request was too large for the selected route."


def event(trace: str) -> bytes:
    return events_pb2.TurnCompleted(
        turn_id=f"turn-{trace[:8]}",
        trace_id=trace,
        session_id="bench",
        agent_id="popagent",
        kind="failure",
        goal=GOAL,
        evidence=EVIDENCE,
        failure_class="rejected",
    ).SerializeToString()


async def consume_all(js: bus.JetStreamContext, durable: str, count: int, handle: bus.BatchHandler) -> float:
    """Seconds `bus.consume_batches` takes to hand `count` events to `handle` and ack them."""
    done = asyncio.Event()
    seen = 0

    async def counted(messages: list[Msg]) -> None:
        nonlocal seen
        await handle(messages)
        seen += len(messages)
        if seen >= count:
            done.set()

    start = time.perf_counter()
    task = asyncio.create_task(
        bus.consume_batches(js, subject=subjects.TURN_COMPLETED, durable=durable, handler=counted, batch=100)
    )
    try:
        await asyncio.wait_for(done.wait(), timeout=600)
        return time.perf_counter() - start
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def ingestion(dsn: str, nats_url: str, count: int) -> tuple[float, float]:
    async with open_pool(dsn, "evolution", max_size=4) as pool, bus.connect(nats_url, name="bench") as nc:
        js = nc.jetstream()
        await bus.ensure_streams(js, ("agent_runner",))
        for _ in range(count):
            await js.publish(
                subjects.TURN_COMPLETED, event(secrets.token_hex(16)), headers={"Nats-Msg-Id": uuid.uuid4().hex}
            )

        async def nothing(messages: list[Msg]) -> None:
            return None

        raw_s = await consume_all(js, "bench-raw", count, nothing)
        ingest = outcome_handler(SignalRepo(pool), max_attempts=5, delay_s=3600)
        ingest_s = await consume_all(js, "bench-ingest", count, ingest)
        stored = await pool.fetchval("SELECT count(*) FROM popagent_evolution_signals")
        assert stored == count, (stored, count)
    return count / raw_s, count / ingest_s


async def applies(dsn: str, rounds: int) -> tuple[list[float], list[float]]:
    apply_us: list[float] = []
    bare_us: list[float] = []
    async with open_pool(dsn, "evolution", max_size=2) as pool:
        await pool.execute(BARE_SCHEMA)
        await pool.execute("UPDATE popagent_autonomy_settings SET evolution_enabled = true")
        signals = SignalRepo(pool)
        store = LearnedStore(pool, signals)
        insert = (
            "INSERT INTO popagent_evolution_signals (id, event_id, trace_id, turn_id, session_id, agent_id,"
            " failure_class, goal, evidence, status, attempts, max_attempts, due_at, last_error)"
            " VALUES ($1, 'bench', $2, 't', 's', $3, 'rejected', $4, $5, 'pending', 0, 5, now() - interval '1 day', '')"
        )
        for i in range(rounds):
            agent = f"bench-{i % 20}"
            await pool.execute(insert, uuid.uuid4(), secrets.token_hex(16), agent, f"{GOAL} #{i}", EVIDENCE)
            [claimed] = await signals.claim(1, "bench")
            proposal = Reflection(
                selections=[Selection(strategy=Strategy.TOOL_FAILURE_CHECKLIST, signal_ids=[claimed.id])]
            )
            start = time.perf_counter()
            await store.apply(claimed.agent_id, [claimed], proposal)
            apply_us.append((time.perf_counter() - start) * 1e6)
            start = time.perf_counter()
            await pool.execute(
                BARE_INSERT, uuid.uuid4(), secrets.token_hex(16), agent, "rejected", f"{GOAL} #{i}", EVIDENCE
            )
            bare_us.append((time.perf_counter() - start) * 1e6)
        applied = await pool.fetchval("SELECT count(*) FROM popagent_evolution_signals WHERE status = 'applied'")
        assert applied == rounds, (applied, rounds)
    return apply_us, bare_us


def p50_p99(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


async def main() -> None:
    parser = argparse.ArgumentParser(description="Evolution ingestion and apply against same-run baselines.")
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--applies", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="popagent-bench-nats-") as nats_dir:
        nats = embedded.start_nats(Path(nats_dir) / "nats")
        try:
            async with scratch_database("evolution") as dsn:
                await migrate(dsn, "evolution", MIGRATIONS)
                raw_rate, ingest_rate = await ingestion(dsn, nats.url, args.events)
                apply_us, bare_us = await applies(dsn, args.applies)
        finally:
            nats.stop()
    print(f"evolution bench: {args.events} outcome events, {args.applies} applies")
    print(f"{'ingestion':<44}{'events/s':>12}{'vs raw':>10}")
    print(f"{'raw JetStream consume (no-op batch handler)':<44}{raw_rate:>12.0f}{'1.00x':>10}")
    print(f"{'signal ingest (parse, redact, insert)':<44}{ingest_rate:>12.0f}{ingest_rate / raw_rate:>9.2f}x")
    apply_p50, apply_p99 = p50_p99(apply_us)
    bare_p50, bare_p99 = p50_p99(bare_us)
    print(f"{'latency (µs)':<44}{'p50':>12}{'p99':>10}{'p50 vs bare':>14}")
    print(f"{'bare insert of a signal-shaped row':<44}{bare_p50:>12.0f}{bare_p99:>10.0f}{'1.00x':>14}")
    print(
        f"{'apply transaction (LearnedStore.apply)':<44}{apply_p50:>12.0f}{apply_p99:>10.0f}{apply_p50 / bare_p50:>13.2f}x"
    )


if __name__ == "__main__":
    asyncio.run(main())
