"""Background runs ramped to 120 % of capacity (RELIABILITY row 11): none rejected or lost, and the
queue wait at 100 %.

    .venv/bin/python -P bench/task_ramp.py [--levels 50,100,120] [--seconds 60] [--capacity 10]

The stack is `make run`'s launcher (every service, embedded PostgreSQL and NATS) with the scripted
model server (bench/helpers/soak_model.py) as its own process, a stub model at 50 chunks/s
(100 chunks of 4 characters, 20 ms apart: a 2 s answer). Capacity is the runs the tasks worker
takes at once (the agent-runtime setting `taskConcurrency`, 10 by default: LangGraph's 10 runs per
worker). At each level, `capacity x level` clients each create a task through `POST /api/tasks`,
follow it to its end and create the next, for `--seconds`; then the level drains.

Printed per level: tasks created, refused (any answer but 201), lost (not `completed` after the
drain), queue wait (the task's `started_at - created_at`, the database's clock) p50/p95, and
completed tasks per second against the lowest level's (the ratio). Targets: 0 refused and 0 lost
at every level, 120 % included; queue wait p95 < 1 s at 100 %.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import httpx
import uvloop

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the benchmarks' shared `bench.helpers` (`python -P` leaves bench/ off the path)
sys.path.append(str(REPO / "tests"))  # last, so no test folder shadows a module: tests/support

from bench.helpers.launched_stack import keep_draining, model_server, tasks_database  # noqa: E402
from support.launcher import launch  # noqa: E402

MODEL = "fake/fake-chat"
TERMINAL = {"completed", "failed", "cancelled", "dead-letter"}


@dataclass
class Level:
    percent: int
    clients: int
    created: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    wall_s: float = 0.0


async def client_loop(api: httpx.AsyncClient, level: Level, number: int, until: float) -> None:
    n = 0
    while time.monotonic() < until:
        created = await api.post(
            "/api/tasks",
            json={
                "prompt": f"ramp {level.percent}% client {number} task {n}",
                "workspaceId": "popagent",
                "model": MODEL,
            },
        )
        n += 1
        if created.status_code != 201:
            level.refused.append(f"{created.status_code}: {created.text[:200]}")
            continue
        task_id = created.json()["id"]
        level.created.append(task_id)
        while True:
            if (await api.get(f"/api/tasks/{task_id}")).json()["status"] in TERMINAL:
                break
            await asyncio.sleep(0.2)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def run(args: argparse.Namespace) -> None:
    percents = [int(p) for p in args.levels.split(",")]
    with tempfile.TemporaryDirectory(prefix="popagent-bench-ramp-") as tmp, model_server(100, 20.0) as model_url:
        stack = launch(Path(tmp), {"NINEROUTER_URL": model_url})
        try:
            await asyncio.to_thread(stack.wait_running, 300)
            keep_draining(stack)
            async with (
                asyncpg.create_pool(
                    tasks_database(stack), min_size=1, max_size=2, server_settings={"search_path": "tasks"}
                ) as pool,
                httpx.AsyncClient(
                    base_url=stack.url,
                    headers={"x-popagent-key": stack.api_key},
                    timeout=60,
                    limits=httpx.Limits(max_connections=200),
                ) as api,
            ):
                settings = await api.patch("/api/settings/agent-runtime", json={"taskConcurrency": args.capacity})
                settings.raise_for_status()
                # Warm-up: every code path once, outside the levels.
                await client_loop(api, Level(0, 1), 0, time.monotonic() + 5)
                levels = []
                for percent in percents:
                    level = Level(percent, max(1, round(args.capacity * percent / 100)))
                    started = time.monotonic()
                    await asyncio.gather(
                        *(client_loop(api, level, n, started + args.seconds) for n in range(level.clients))
                    )
                    level.wall_s = time.monotonic() - started
                    levels.append(level)
                rows = {
                    level.percent: await pool.fetch(
                        "SELECT status, EXTRACT(EPOCH FROM started_at - created_at)::float8 AS wait "
                        "FROM popagent_agent_tasks WHERE id = ANY($1::uuid[])",
                        level.created,
                    )
                    for level in levels
                }
        finally:
            stack.stop()
    print(
        f"task ramp: capacity {args.capacity} runs (taskConcurrency), stub model 50 chunks/s (2 s answers), "
        f"{args.seconds:g} s per level, each client creates its next task when its last one ends"
    )
    baseline_rate = 0.0
    for level in levels:
        found = rows[level.percent]
        completed = [row for row in found if row["status"] == "completed"]
        waits = [row["wait"] for row in found if row["wait"] is not None]
        lost = len(level.created) - len(completed)
        rate = len(completed) / level.wall_s
        baseline_rate = baseline_rate or rate
        verdict = "ok" if not level.refused and not lost else "MISSED"
        line = (
            f"  {level.percent:3d} % ({level.clients:2d} in flight): {len(level.created):4d} created, "
            f"{len(level.refused)} refused, {lost} lost ({verdict}); queue wait p50 {statistics.median(waits) * 1000:6.0f} ms "
            f"p95 {percentile(waits, 0.95) * 1000:6.0f} ms; {rate:5.2f} completed/s ({rate / baseline_rate:.2f}x the first level)"
        )
        if level.percent == 100:
            line += f"  (p95 target < 1 s: {'ok' if percentile(waits, 0.95) < 1 else 'MISSED'})"
        print(line)
        for refusal in level.refused[:3]:
            print(f"      refused: {refusal}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--levels", default="50,100,120", help="percent of capacity, in order")
    parser.add_argument("--seconds", type=float, default=60.0, help="load per level")
    parser.add_argument("--capacity", type=int, default=10, help="the tasks worker's concurrency")
    uvloop.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
