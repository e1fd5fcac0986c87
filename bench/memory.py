"""Observational memory over a 300-turn conversation against full replay, measured in the same run.

Embedded PostgreSQL (agent-runner's migrations), the scripted model server over real HTTP (it also
answers the Observer and the Reflector), and the turn layer's memory steps in-process
(tests/memory/harness.py: `ObservationalMemory.context()`, a pydantic-ai run on the lean model, the
thread rows stored as a chat turn stores them). Two conversations of the same 300 scripted turns:

- OM: observation at 3,000 tokens of unobserved messages, reflection at 4,000, 4 raw messages kept;
- full replay: memory disabled, every turn sends the whole thread (on a model with a 1M window).

A third conversation of the same turns has async observation on (buffering from 20 % of the
threshold, block_after 1.5) and an Observer that takes `--observer-ms` of model time. After each of
its turns that left a background observation running, the next turn's request is probed (sent, its
answer not stored), `--think-ms` apart, until the observation is done, then as many times again with
none running: the same thread, the same request, with and without the background work beside it.
(Background steps wait while a turn is in flight, so they run in the gaps and overlap the turns
that begin while one is under way.)

Printed: prompt tokens per turn (o200k count of what was sent) for both and their ratio; time to
first token at turns 296-300 against turns 1-5 (median, each path against itself); the Observer's
cost excluding model time: what an observing turn spends in observational memory beyond the
Observer/Reflector calls themselves, and what every other turn spends in it; and, in the async
conversation, the time to first token (p50) of the probes with a background observation in flight
from their start to their first text against those with none, their ratio against the 1.10 target;
and the time to read the full-replay thread's messages as background observation reads an
unobserved tail (`ObservationStore.raw`), parsed on every read against from the parsed-message cache.

    .venv/bin/python bench/memory.py [--turns 300] [--observer-ms 50] [--think-ms 10]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent / "tests"))
sys.path.insert(0, str(BENCH_DIR.parent))  # the benchmarks' shared `bench.helpers`

import asyncpg  # noqa: E402
from memory.harness import Conversations, TurnRecord, request_tokens, settings  # noqa: E402

from bench.helpers.databases import emptied_database  # noqa: E402
from popagent_agent_runner.memory.observational.store import (  # noqa: E402
    PARSED_MESSAGES_MAX_CHARS,
    ObservationStore,
    ParsedMessages,
)
from popagent_agent_runner.service import MIGRATIONS  # noqa: E402
from popagent_core.migrate import migrate  # noqa: E402
from popagent_dev import embedded  # noqa: E402
from support.memory_agents import is_observer, memory_agents  # noqa: E402
from support.model_gateway import Body, ModelGateway, ModelInfo, Responder, Turn  # noqa: E402

OM_MODEL = "fake/fake-chat"
REPLAY_MODEL = "fake/huge-window"
TOPICS = ("the garden", "a trip to Porto", "the quarterly report", "a chess opening", "the new bicycle")


def answer(body: Body) -> Turn:
    last = str(body["messages"][-1].get("content"))[:80]
    return Turn.say(f"Noted: {last}. Here is a considered reply of a few sentences, as a model would give.")


def prompt(n: int) -> str:
    return f"Turn {n}: some thoughts about {TOPICS[n % len(TOPICS)]}, detail {n * 7}, and a question about it?"


def slow_observer(seconds: float) -> Responder:
    """The scripted answers, the Observer's after `seconds` of model time (nothing else waits)."""
    answers = memory_agents(answer)

    async def respond(body: Body) -> Turn:
        if is_observer(body):
            await asyncio.sleep(seconds)
        return answers(body)

    return respond


class Timed:
    """Wall time spent inside the Observer and Reflector calls (model time, as the harness sees it)."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def wrap(self, method: Any) -> Any:
        async def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await method(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - started

        return timed


def median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


async def conversation(harness: Conversations, model: str, turns: int, memory_settings: Any) -> list[TurnRecord]:
    chat = await harness.new(model)
    for n in range(1, turns + 1):
        await chat.turn(prompt(n), memory_settings)
    return chat.turns


async def run(turns: int, observer_ms: float, think_ms: float) -> None:
    with (
        tempfile.TemporaryDirectory(prefix="popagent-bench-memory-") as tmp,
        embedded.postgres(Path(tmp) / "pg") as admin_dsn,
    ):
        dsn = await emptied_database(admin_dsn, "popagent_bench_memory")
        await migrate(dsn, "agent_runner", MIGRATIONS)
        pool = await asyncpg.create_pool(dsn, min_size=1, max_size=4, server_settings={"search_path": "agent_runner"})
        assert pool is not None
        models = (ModelInfo(OM_MODEL, context_length=128_000), ModelInfo(REPLAY_MODEL, context_length=1_000_000))
        try:
            async with (
                ModelGateway(memory_agents(answer), models=models, api_key="sk-bench", record=True) as gateway,
                Conversations.open(pool, gateway, "sk-bench") as harness,
            ):
                timed = Timed()
                harness.memory.agents.observe = timed.wrap(harness.memory.agents.observe)  # type: ignore[method-assign]
                harness.memory.agents.reflect = timed.wrap(harness.memory.agents.reflect)  # type: ignore[method-assign]
                om_settings = settings(
                    observation_message_tokens=3000,
                    reflection_observation_tokens=4000,
                    raw_history_retention_messages=4,
                    previous_observation_max_tokens=2000,
                )
                om = await conversation(harness, OM_MODEL, turns, om_settings)
                model_s = timed.seconds
                replay_chat = await harness.new(REPLAY_MODEL)
                for n in range(1, turns + 1):
                    await replay_chat.turn(prompt(n), settings(enabled=False))
                replay = replay_chat.turns
                cold, cached = await raw_reads(harness.memory.store, replay_chat.thread_id)
                gateway.responder = slow_observer(observer_ms / 1000)
                async_settings = settings(
                    **{
                        **om_settings.__dict__,
                        "async_observation_enabled": True,
                        "observation_buffer_activation": 0.2,
                        "observation_block_after": 1.5,
                    }
                )
                during, alone = await background_probes(harness, turns, async_settings, think_ms / 1000)
        finally:
            await pool.close()

    om_tokens = [request_tokens(r.request) for r in om]
    replay_tokens = [request_tokens(r.request) for r in replay]
    print(f"prompt tokens per turn over {turns} turns (o200k count of what was sent)")
    print(f"  {'':12} {'mean':>8} {'max':>8} {'turn ' + str(turns):>10}")
    for name, values in (("OM", om_tokens), ("full replay", replay_tokens)):
        print(f"  {name:12} {statistics.mean(values):8.0f} {max(values):8d} {values[-1]:10d}")
    print(
        f"  OM / full replay: mean {statistics.mean(om_tokens) / statistics.mean(replay_tokens):.3f}, "
        f"turn {turns} {om_tokens[-1] / replay_tokens[-1]:.3f} ({replay_tokens[-1] / om_tokens[-1]:.1f}x fewer)"
    )
    for name, records in (("OM", om), ("full replay", replay)):
        first = median_ms([r.first_text_s for r in records[:5]])
        last = median_ms([r.first_text_s for r in records[-5:]])
        print(
            f"time to first token, {name}: turns 1-5 {first:.1f} ms, turns {turns - 4}-{turns} {last:.1f} ms, ratio {last / first:.2f}"
        )
    observing = [r for r in om if r.memory.observed]
    quiet = [r for r in om if not r.memory.observed]
    bookkeeping = sum(r.context_s for r in observing) - model_s
    print(
        f"observer cost excluding model time: {len(observing)} observing turns, "
        f"{bookkeeping / max(1, len(observing)) * 1000:.1f} ms each beyond {model_s / max(1, len(observing)) * 1000:.1f} ms "
        f"in Observer/Reflector calls; other turns {median_ms([r.context_s for r in quiet]):.1f} ms median in memory"
    )
    print(
        f"reading a thread's {turns * 2} unobserved messages (ObservationStore.raw, median of {READS} reads): "
        f"parsed each time {median_ms(cold):.2f} ms, from the parsed-message cache {median_ms(cached):.2f} ms "
        f"({statistics.median(cold) / statistics.median(cached):.1f}x)"
    )
    if during and alone:
        ratio = statistics.median(during) / statistics.median(alone)
        print(
            f"async observation ({observer_ms:.0f} ms Observer, probes {think_ms:.0f} ms apart): time to first token p50 {median_ms(during):.1f} ms "
            f"over {len(during)} probes with a background observation in flight, {median_ms(alone):.1f} ms over "
            f"{len(alone)} without; ratio {ratio:.3f} (target <= 1.10: {'met' if ratio <= 1.10 else 'MISSED'})"
        )
    else:
        print(f"async observation: no comparison ({len(during)} probes in flight, {len(alone)} without)")


READS = 15


async def raw_reads(store: ObservationStore, thread_id: str) -> tuple[list[float], list[float]]:
    """Times of reading the whole thread as background observation reads its unobserved tail:
    with the messages parsed on every read (a cache emptied before each), and from the cache."""
    cold: list[float] = []
    cached: list[float] = []
    for _ in range(READS):
        store.parsed = ParsedMessages(PARSED_MESSAGES_MAX_CHARS)
        started = time.perf_counter()
        await store.raw(thread_id, 0)
        cold.append(time.perf_counter() - started)
        started = time.perf_counter()
        await store.raw(thread_id, 0)
        cached.append(time.perf_counter() - started)
    return cold, cached


def _quiet(record: TurnRecord) -> bool:
    """A probe whose own memory step did nothing (no activation, observation, reflection or wait)."""
    memory = record.memory
    return not (memory.observed or memory.waited or memory.reflection)


async def background_probes(
    harness: Conversations, turns: int, memory_settings: Any, think_s: float, most: int = 20
) -> tuple[list[float], list[float]]:
    """Times to first token of probes with a background observation in flight, and without one."""
    chat = await harness.new(OM_MODEL)
    during: list[float] = []
    alone: list[float] = []
    for n in range(1, turns + 1):
        await chat.turn(prompt(n), memory_settings)
        running = harness.memory.background(chat.thread_id)
        if running is None or running.done():
            continue
        with_it: list[float] = []
        while not running.done() and len(with_it) < most:
            await asyncio.sleep(think_s)
            probe = await chat.turn(prompt(n + 1), memory_settings, probe=True)
            if _quiet(probe) and probe.background_at_start and probe.background_at_first_text:
                with_it.append(probe.first_text_s)
        await running
        without: list[float] = []
        for _ in range(len(with_it)):
            await asyncio.sleep(think_s)
            probe = await chat.turn(prompt(n + 1), memory_settings, probe=True)
            if _quiet(probe) and not probe.background_at_start and not probe.background_at_first_text:
                without.append(probe.first_text_s)
        during.extend(with_it)
        alone.extend(without)
    return during, alone


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--observer-ms", type=float, default=50, help="the async conversation's Observer model time")
    parser.add_argument("--think-ms", type=float, default=10, help="the gap between the async conversation's probes")
    args = parser.parse_args()
    asyncio.run(run(args.turns, args.observer_ms, args.think_ms))


if __name__ == "__main__":
    main()
