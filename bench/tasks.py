"""Tasks service: claims+completions per second and enqueue->start latency with 1 and 4
worker processes, against a bare `SELECT 1` round-trip rate measured in the same run.

Real processes: embedded PostgreSQL and NATS, one `python -m popagent_tasks serve` (API,
scheduler, recovery; no executor) and N `python -m popagent_tasks worker` processes
running the tests' scripted executor (prompt "ok": returns at once). Hooks are off (no
hooks service runs here).

- Throughput: the workers are up and idle; N tasks are inserted in one transaction (one
  wake-up); the figure is N / (last completion - insert), from the database's clock.
- Latency: tasks are created one at a time through the gRPC API at a paced rate; each
  task's enqueue->start is `started_at - created_at` (database clock).

Targets: >= 1,000 tasks/s with 4 workers on 2 cores; enqueue->start p99 <= 50 ms.
`BENCH_TASKS_N` (default 4000) and `BENCH_TASKS_LATENCY_N` (default 1000) size the run.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a plain script, this folder comes first on sys.path; keep it off (make bench uses -P)
# so no bench file can ever shadow a standard module.
BENCH_DIR = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != BENCH_DIR]
sys.path.insert(0, str(BENCH_DIR.parent))  # the benchmarks' shared `bench.helpers`

import os  # noqa: E402

# Spawning workers forks while gRPC threads run; gRPC's notice about it is noise here.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

import asyncio  # noqa: E402
import contextlib  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import AsyncIterator  # noqa: E402

import asyncpg  # noqa: E402
import uvloop  # noqa: E402

from bench.helpers.databases import emptied_database  # noqa: E402
from popagent.tasks.v1 import tasks_pb2, tasks_pb2_grpc  # noqa: E402
from popagent_core.credentials import generate_credentials  # noqa: E402
from popagent_core.db import open_pool  # noqa: E402
from popagent_core.grpc_client import check_health, open_channel  # noqa: E402
from popagent_core.migrate import migrate  # noqa: E402
from popagent_dev import embedded  # noqa: E402
from popagent_tasks.repo import TaskRepo  # noqa: E402
from popagent_tasks.service import MIGRATIONS  # noqa: E402

THROUGHPUT_N = int(os.environ.get("BENCH_TASKS_N", "4000"))
LATENCY_N = int(os.environ.get("BENCH_TASKS_LATENCY_N", "1000"))
LATENCY_RATE = 200.0
TESTS_DIR = BENCH_DIR.parent / "tests"


def spawn(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    output = log.open("ab")
    return subprocess.Popen(
        embedded.orphan_safe([sys.executable, "-m", "popagent_tasks", *args]),
        env={**os.environ, **env, "PYTHONPATH": str(TESTS_DIR)},
        stdout=output,
        stderr=output,
    )


async def wait_log(log: Path, needle: str, process: subprocess.Popen[bytes], within: float = 60) -> None:
    deadline = time.monotonic() + within
    while needle not in log.read_text(errors="replace"):  # noqa: ASYNC240 - a small local log
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{log.name} not ready:\n{log.read_text(errors='replace')[-2000:]}")  # noqa: ASYNC240
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def workers(count: int, env: dict[str, str], logs: Path) -> AsyncIterator[list[subprocess.Popen[bytes]]]:
    started = []
    for index in range(count):
        log = logs / f"worker-{count}-{index}.log"
        process = spawn(["worker", "--executor", "tasks.executors:scripted"], env, log)
        started.append((process, log))
    try:
        for process, log in started:
            await wait_log(log, '"worker started"', process)
        yield [process for process, _ in started]
    finally:
        for process, _ in started:
            process.terminate()
        for process, _ in started:
            process.wait(15)


async def select_one_rate(dsn: str, seconds: float = 2.0, connections: int = 1) -> float:
    conns = [await asyncpg.connect(dsn) for _ in range(connections)]
    done = 0

    async def loop(conn: asyncpg.Connection, deadline: float) -> None:
        nonlocal done
        while time.monotonic() < deadline:
            await conn.fetchval("SELECT 1")
            done += 1

    deadline = time.monotonic() + seconds
    await asyncio.gather(*(loop(conn, deadline) for conn in conns))
    for conn in conns:
        await conn.close()
    return done / seconds


async def reset(pool: asyncpg.Pool) -> None:
    await pool.execute("TRUNCATE popagent_agent_tasks CASCADE")
    await pool.execute("DELETE FROM popagent_outbox")


async def throughput(repo: TaskRepo, n: int) -> float:
    inserted_at = await repo.pool.fetchval("SELECT clock_timestamp()")
    await repo.create_tasks(["ok"] * n, source="user", workspace_id="bench")
    deadline = time.monotonic() + 120
    while await repo.pool.fetchval("SELECT count(*) FROM popagent_agent_tasks WHERE status = 'completed'") < n:
        if time.monotonic() > deadline:
            raise RuntimeError("throughput run did not finish in 120 s")
        await asyncio.sleep(0.05)
    last = await repo.pool.fetchval("SELECT max(finished_at) FROM popagent_agent_tasks")
    assert await repo.pool.fetchval("SELECT count(*) FROM popagent_agent_tasks WHERE attempt_count <> 1") == 0
    return n / (last - inserted_at).total_seconds()


async def latency(stub: tasks_pb2_grpc.TasksServiceStub, repo: TaskRepo, n: int) -> tuple[float, float, float]:
    interval = 1 / LATENCY_RATE
    next_at = time.monotonic()
    for _ in range(n):
        await stub.CreateTask(tasks_pb2.CreateTaskRequest(prompt="ok", workspace_id="bench"))
        next_at += interval
        await asyncio.sleep(max(next_at - time.monotonic(), 0))
    deadline = time.monotonic() + 60
    while await repo.pool.fetchval("SELECT count(*) FROM popagent_agent_tasks WHERE status = 'completed'") < n:
        if time.monotonic() > deadline:
            raise RuntimeError("latency run did not finish in 60 s")
        await asyncio.sleep(0.05)
    samples = [
        row["ms"]
        for row in await repo.pool.fetch(
            "SELECT extract(epoch FROM started_at - created_at) * 1000 AS ms FROM popagent_agent_tasks"
        )
    ]
    cuts = statistics.quantiles([float(s) for s in samples], n=100)
    return cuts[49], cuts[98], max(float(s) for s in samples)


async def run() -> None:
    with tempfile.TemporaryDirectory(prefix="popagent-bench-tasks-") as tmp:
        data = Path(tmp)
        tokens, callers = generate_credentials()
        with embedded.postgres(data / "pg") as admin_dsn, embedded.nats(data / "nats") as nats:
            dsn = await emptied_database(admin_dsn, "popagent_bench_tasks")
            await migrate(dsn, "tasks", MIGRATIONS)
            address = f"127.0.0.1:{embedded.free_port()}"
            env = {
                "DATABASE_URL": dsn,
                "NATS_URL": nats.url,
                "POPAGENT_INTERNAL_CALLERS": callers,
                "POPAGENT_INTERNAL_TOKEN": tokens["tasks"],
                "POPAGENT_TASKS_ADDR": address,
                "POPAGENT_TASKS_HOOKS_ENABLED": "false",
                "POPAGENT_TASKS_BROWSER_CLOSE_ENABLED": "false",
                "POPAGENT_TASKS_CONCURRENCY": "32",
                "POPAGENT_TASKS_CLAIM_BATCH": "32",
                "POPAGENT_LOG_LEVEL": "WARNING",
            }
            serve_log = data / "serve.log"
            server = spawn(["serve"], {**env, "POPAGENT_LOG_LEVEL": "INFO"}, serve_log)
            try:
                await wait_log(serve_log, '"ready"', server)
                sequential = await select_one_rate(dsn)
                parallel = await select_one_rate(dsn, connections=4)
                print(f"SELECT 1 round trips: {sequential:,.0f}/s on one connection, {parallel:,.0f}/s on four")
                async with (
                    open_pool(dsn, "tasks", max_size=4) as pool,
                    open_channel(address, tokens["gateway"]) as channel,
                ):
                    assert await check_health(channel)
                    repo = TaskRepo(pool)
                    stub = tasks_pb2_grpc.TasksServiceStub(channel)
                    worker_env = {**env, "POPAGENT_LOG_LEVEL": "INFO", "POPAGENT_TASKS_SCHEDULER_ENABLED": "false"}
                    for count in (1, 4):
                        async with workers(count, worker_env, data):
                            await reset(pool)
                            rate = await throughput(repo, THROUGHPUT_N)
                            await reset(pool)
                            p50, p99, worst = await latency(stub, repo, LATENCY_N)
                            await reset(pool)
                        print(
                            f"{count} worker{'s' if count > 1 else ' '}: {rate:,.0f} tasks/s claimed+completed"
                            f" ({rate / sequential:.2f}x sequential SELECT 1, {rate / parallel:.2f}x four-connection);"
                            f" enqueue->start p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {worst:.1f} ms"
                            f" ({LATENCY_N} tasks at {LATENCY_RATE:.0f}/s through gRPC)"
                        )
            finally:
                server.terminate()
                server.wait(15)


def main() -> None:
    uvloop.run(run())


if __name__ == "__main__":
    main()
