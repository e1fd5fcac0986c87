"""The three-node run at a larger size (issue 39): throughput by runner count, and how long each
fault takes to heal, on one machine.

    .venv/bin/python -P bench/scale.py [--chats 24] [--seconds 20] [--fault-gap-s 25] [--chunks 40] [--chunk-delay-ms 50]

The cluster is tests/scale's (`support.cluster`): three nats-server processes in one JetStream
cluster (streams and the turn log stored on all three), embedded PostgreSQL, two gateways, three
agent-runners, two tasks workers, the other services once, each process started as a pod runs it.
The scripted model server (bench/helpers/soak_model.py) answers every turn with `--chunks`
chunks `--chunk-delay-ms` apart. `--chats` clients run chat turns back to back, half through each
gateway (a client whose gateway is gone resumes through the other, as tests/scale's do).

1. **Throughput by runners.** Two runners are stopped (SIGTERM: they hand over and leave), then
   started again one by one: turns per second over `--seconds` with 1, 2 and 3 runners, printed as
   the ratio to the one-runner figure of this run (the baseline), so the machine's other load
   cancels out as far as it can. On a 2-core machine every process shares the same cores: the
   ratio says how much the routing spreads work, not what more machines would add.
2. **Faults under load**, `--fault-gap-s` apart, each on the steady load of three runners: a NATS
   server killed (SIGKILL; started again at once, on its store), the agent-runner running a turn
   killed (started again after 5 s), a gateway killed (started again after 5 s), a tasks worker
   killed while a batch of tasks runs (started again after 5 s). For each: the fault's own figure
   (the longest stall of a live stream after the NATS server's loss; kill to the next text of a
   turn the runner ran; kill to the first chunk a client got through the other gateway; kill to
   every task of the batch ending), and the time until turns completed per second are back at
   80 % of the rate before the fault (5 s windows).

It ends with what tests/scale asserts, on everything this run did: every chat answer completed,
every task completed with one completed turn, no outbox event lost or doubled.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

import httpx
import uvloop

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the benchmarks' shared `bench.helpers` (`python -P` leaves bench/ off the path)
sys.path.append(str(REPO / "tests"))  # last, so no test folder shadows a module: tests/support

from scale.scenario import (  # noqa: E402
    Chat,
    create_task,
    new_session,
    outbox_counts,
    running_turn_runners,
    session_turns,
    stored_answer,
    task_outcomes,
    task_story,
)

from bench.helpers.launched_stack import model_server  # noqa: E402
from popagent_dev import embedded  # noqa: E402
from support.cluster import Cluster, ClusterConfig, Node  # noqa: E402
from support.launcher import DataHome  # noqa: E402

WINDOW_S = 5.0
RECOVERED_AT = 0.8
SETTINGS = {
    "POPAGENT_TURN_LEASE_S": "3",
    "POPAGENT_TASKS_HEARTBEAT_INTERVAL_S": "0.5",
    "POPAGENT_TASKS_HEARTBEAT_TIMEOUT_S": "3",
    "POPAGENT_TASKS_SWEEP_INTERVAL_S": "1",
    "POPAGENT_TASKS_POLL_INTERVAL_S": "0.2",
    "POPAGENT_TASKS_RETRY_BASE_S": "1",
    "POPAGENT_TASKS_RETRY_CAP_S": "4",
}


class Load:
    """`chats` clients running turns back to back through both gateways; every finished chat kept."""

    def __init__(self, cluster: Cluster, chats: int) -> None:
        self.cluster = cluster
        self.chats = chats
        self.finished: list[Chat] = []
        self.live: list[Chat] = []
        # The chat each chat followed in its client's loop (None: its loop's first), by id().
        self.previous: dict[int, Chat | None] = {}
        self._stop = asyncio.Event()
        self._loops: list[asyncio.Task[None]] = []

    async def start(self, client: httpx.AsyncClient) -> None:
        gateways = self.cluster.gateway_urls
        for number in range(self.chats):
            order = gateways[number % 2 :] + gateways[: number % 2]
            self._loops.append(asyncio.create_task(self._loop(client, order, number)))

    async def _loop(self, client: httpx.AsyncClient, gateways: list[str], number: int) -> None:
        session = ""
        turns = 0
        previous: Chat | None = None
        while not self._stop.is_set():
            try:
                if turns % 10 == 0:
                    session = await new_session(client, gateways[0], self.cluster.api_key)
                chat = Chat(
                    session, f"load {number} turn {turns} {uuid.uuid4().hex[:6]}", gateways, self.cluster.api_key
                )
                self.live.append(chat)
                self.previous[id(chat)] = previous
                previous = chat
                await chat.run(client)
                self.live.remove(chat)
                if chat.status is None:
                    # Its gateway did not answer at all: the next try goes to the other, as a
                    # load balancer's health check would send it.
                    gateways = gateways[1:] + gateways[:1]
                    await asyncio.sleep(0.2)
                    continue
                self.finished.append(chat)
            except (httpx.HTTPError, AssertionError):
                # A gateway gone before the turn started: the next one starts through the other.
                gateways = gateways[1:] + gateways[:1]
                await asyncio.sleep(0.5)
            turns += 1

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._loops)

    def completed_between(self, start: float, end: float) -> int:
        return sum(1 for chat in self.finished if chat.terminal == "finish" and start <= chat.ended_at < end)

    def rate(self, start: float, end: float) -> float:
        return self.completed_between(start, end) / (end - start)

    async def recovered_after(self, fault_at: float, baseline: float, within_s: float = 120.0) -> float | None:
        """Seconds from `fault_at` until a 5 s window's turns per second is back at 80 % of `baseline`."""
        deadline = fault_at + within_s
        while time.monotonic() < deadline:
            await asyncio.sleep(1.0)
            now = time.monotonic()
            for end in _frange(fault_at + WINDOW_S, now, 0.5):
                if self.rate(end - WINDOW_S, end) >= RECOVERED_AT * baseline:
                    return end - fault_at
        return None


def _frange(start: float, stop: float, step: float) -> list[float]:
    values = []
    while start <= stop:
        values.append(start)
        start += step
    return values


async def measure(load: Load, seconds: float) -> float:
    start = time.monotonic()
    await asyncio.sleep(seconds)
    return load.rate(start, time.monotonic())


async def throughput_by_runners(cluster: Cluster, load: Load, seconds: float) -> dict[int, float]:
    runners = cluster.named("agent-runner")
    for node in runners[1:]:
        await asyncio.to_thread(node.stop)
    await asyncio.sleep(3)  # the load settles on the one runner left
    rates = {1: await measure(load, seconds)}
    for count, node in enumerate(runners[1:], start=2):
        await asyncio.to_thread(cluster.restart, node)
        await asyncio.sleep(3)
        rates[count] = await measure(load, seconds)
    return rates


async def fault_nats(cluster: Cluster, load: Load, baseline: float) -> dict[str, float | None]:
    victim = cluster.nats[0]
    fault_at = time.monotonic()
    victim.kill()
    await asyncio.to_thread(victim.start)
    recovered = await load.recovered_after(fault_at, baseline)
    stalls = [
        later - earlier
        for chat in [*load.finished, *load.live]
        for earlier, later in zip(chat.chunk_times, chat.chunk_times[1:], strict=False)
        if earlier >= fault_at - 1 and earlier < fault_at + 30
    ]
    return {"longest stream stall": max(stalls, default=None), "throughput back": recovered}


async def fault_runner(cluster: Cluster, load: Load, baseline: float, database_url: str) -> dict[str, float | None]:
    live = [chat for chat in load.live if chat.streaming and not chat.done]
    on_runner = await running_turn_runners(database_url, [chat.session for chat in live])
    if not on_runner:
        return {"takeover": None, "throughput back": None}
    runner_id = sorted(on_runner.values())[0]
    victim = cluster.runner_at(f"127.0.0.1:{runner_id.rpartition(':')[2]}")
    affected = [chat for chat in live if on_runner.get(chat.session) == runner_id]
    seen = {id(chat): len(chat.chunk_times) for chat in affected}
    fault_at = time.monotonic()
    victim.kill()
    restart = asyncio.create_task(_restart_after(cluster, victim, 5.0))
    recovered = await load.recovered_after(fault_at, baseline)
    await restart
    next_text = [
        chat.chunk_times[seen[id(chat)]] - fault_at for chat in affected if len(chat.chunk_times) > seen[id(chat)]
    ]
    return {"takeover (kill to next chunk)": max(next_text, default=None), "throughput back": recovered}


async def fault_gateway(cluster: Cluster, load: Load, baseline: float) -> dict[str, float | None]:
    victim = cluster.named("gateway")[0]
    affected = [chat for chat in load.live if chat.gateways[0] == victim.address and chat.streaming]
    fault_at = time.monotonic()
    victim.kill()
    restart = asyncio.create_task(_restart_after(cluster, victim, 5.0))
    recovered = await load.recovered_after(fault_at, baseline)
    await restart
    gaps = [gap for chat in affected for gap in chat.resume_gaps]
    return {"resume through the other (kill to next chunk)": max(gaps, default=None), "throughput back": recovered}


async def fault_worker(
    cluster: Cluster, load: Load, baseline: float, client: httpx.AsyncClient, database_url: str, tasks: int
) -> tuple[dict[str, float | None], list[str]]:
    gateways = cluster.gateway_urls
    task_ids = [await create_task(client, gateways[n % 2], cluster.api_key, f"batch task {n}", 6) for n in range(tasks)]
    await asyncio.sleep(2)
    victim = cluster.named("tasks")[0]
    fault_at = time.monotonic()
    victim.kill()
    restart = asyncio.create_task(_restart_after(cluster, victim, 5.0))
    recovered = await load.recovered_after(fault_at, baseline)
    await restart
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        outcomes = await task_outcomes(database_url, task_ids)
        if all(o.status in ("completed", "failed", "dead-letter") for o in outcomes.values()):
            break
        await asyncio.sleep(0.5)
    return {"every task of the batch ended": time.monotonic() - fault_at, "throughput back": recovered}, task_ids


async def _restart_after(cluster: Cluster, node: Node, delay_s: float) -> None:
    await asyncio.sleep(delay_s)
    await asyncio.to_thread(cluster.restart, node)


def _seconds(value: float | None) -> str:
    return "not within 120 s" if value is None else f"{value:.1f} s"


async def run(args: argparse.Namespace, database_url: str, observability_url: str, models: str, workdir: Path) -> int:
    config = ClusterConfig(workdir, database_url, observability_url, models, settings=SETTINGS)
    cluster = Cluster(config)
    started = time.monotonic()
    await asyncio.to_thread(cluster.start)
    print(
        f"cluster up in {time.monotonic() - started:.0f} s: {len(cluster.nodes)} processes, {len(cluster.nats)} NATS servers"
    )
    failures: list[str] = []
    try:
        limits = httpx.Limits(max_connections=args.chats * 4)
        async with httpx.AsyncClient(timeout=httpx.Timeout(120, connect=5), limits=limits) as client:
            load = Load(cluster, args.chats)
            await load.start(client)
            await asyncio.sleep(5)
            rates = await throughput_by_runners(cluster, load, args.seconds)
            print(f"\nthroughput, {args.chats} chats, turns per second (ratio to 1 runner, this run):")
            for count, rate in rates.items():
                print(f"  {count} runner{'s' if count > 1 else ''}: {rate:.2f}/s  x{rate / rates[1]:.2f}")
            baseline = rates[3]
            print(
                f"\nfaults on the load of 3 runners ({baseline:.2f} turns/s); recovered = back at 80 % in 5 s windows"
            )
            results = {"NATS server killed": await fault_nats(cluster, load, baseline)}
            await asyncio.sleep(args.fault_gap_s)
            results["agent-runner killed mid-turn"] = await fault_runner(cluster, load, baseline, database_url)
            await asyncio.sleep(args.fault_gap_s)
            results["gateway killed mid-stream"] = await fault_gateway(cluster, load, baseline)
            await asyncio.sleep(args.fault_gap_s)
            worker, task_ids = await fault_worker(cluster, load, baseline, client, database_url, args.tasks)
            results["tasks worker killed"] = worker
            for fault, figures in results.items():
                print(f"  {fault}: " + "; ".join(f"{name} {_seconds(value)}" for name, value in figures.items()))
            await load.stop()

            chats = load.finished
            # A resume that found the turn already ended (204) reads the stored answer instead, as
            # tests/scale does: such a turn finished unseen, and its stored answer must be whole.
            unseen = [chat for chat in chats if chat.ended_unseen]
            unfinished = [chat for chat in chats if chat.terminal != "finish" and not chat.ended_unseen]
            print(f"\n{len(chats)} chat turns, {len(unseen)} ended unseen, {len(unfinished)} not finished")
            for chat in unseen:
                stored = await stored_answer(client, cluster.gateway_urls[1], cluster.api_key, chat)
                if len(stored) != 1 or not stored[0]:
                    failures.append(f"a turn that ended unseen stored {stored!r} ({chat.prompt})")
            for chat in unfinished[:5]:
                ends = [c["type"] for c in chat.chunks[-3:]]
                print(f"  unfinished: status {chat.status}, done {chat.done}, last {ends}, errors {chat.errors[-2:]}")
                before = load.previous.get(id(chat))
                if before is not None and before.session == chat.session:
                    print(
                        f"    after a chat on its session that ended {chat.started_at - before.ended_at:.3f} s before: "
                        f"terminal {before.terminal}, unseen {before.ended_unseen}, "
                        f"resumed through {before.resumed_through}, errors {before.errors[-2:]}"
                    )
                print(await session_turns(database_url, chat.session))
            if unfinished:
                failures.append(f"{len(unfinished)} chat turns did not finish")
            outcomes = await task_outcomes(database_url, task_ids)
            wrong = {t: o for t, o in outcomes.items() if o.status != "completed" or o.completed_turns != 1}
            print(f"{len(outcomes)} tasks, {len(wrong)} not completed exactly once")
            for task_id in wrong:
                print(await task_story(database_url, task_id))
            if wrong:
                failures.append(f"tasks not completed exactly once: {wrong}")
        counts = await outbox_counts(database_url)
        pending = {schema: p for schema, (_, p) in counts.items() if p}
        print(f"outbox rows not published: {pending or 'none'}")
        if pending:
            failures.append(f"outbox rows left unpublished: {pending}")
        waits = [gap for chat in chats for gap in chat.resume_gaps]
        if waits:
            print(f"resumed streams: {len(waits)}, median gap {statistics.median(waits):.1f} s")
    finally:
        await asyncio.to_thread(cluster.stop)
    for failure in failures:
        print(f"FAIL: {failure}")
    return 1 if failures else 0


async def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--chats", type=int, default=24)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--fault-gap-s", type=float, default=25.0)
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--chunks", type=int, default=40)
    parser.add_argument("--chunk-delay-ms", type=float, default=50.0)
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        data = DataHome()  # readable by pgserver's own user; removed with this object
        home = data.path
        admin_dsn = stack.enter_context(embedded.postgres(home / "postgres", sole_owner=True))
        database_url = await embedded.ensure_database(admin_dsn, "popagent")
        observability_url = await embedded.ensure_database(admin_dsn, "popagent_observability")
        models = stack.enter_context(model_server(args.chunks, args.chunk_delay_ms))
        return await run(args, database_url, observability_url, models, home / "cluster")


if __name__ == "__main__":
    os.environ.setdefault("OTEL_SDK_DISABLED", "true")
    raise SystemExit(uvloop.run(main()))
