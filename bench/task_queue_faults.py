"""The task queue at the RELIABILITY table's full scale (issue 41): rows 1, 2, 5, 6, 7, 8 and 9,
each printed as its figures and ok/MISSED against the row's bar.

Real parts only: a private PostgreSQL (stoppable, for row 8's restart), an embedded NATS, and
`python -m popagent_tasks worker` processes running the tests' scripted executor
(tests/tasks/executors.py; `effect` inserts (task_id, attempt, pid) into an effects table, so
what ran is counted from the database, not from the workers' word). Each row gets a fresh
database; the CI-sized version of each row lives in tests/tasks/ (named in the row's function).

  1  16 worker processes x 10,000 tasks: 0 lost, 0 run twice.
  2  the same, paced, with a random worker SIGKILLed every 2 s (and replaced): 0 lost; every
     task the kill orphaned requeued within heartbeat timeout + sweep interval and terminal
     within that plus its own run; each re-execution a new fenced attempt with one error recorded.
  5  retry backoff under a controlled clock: every retry's delay (next_attempt_at - the failure,
     both from the failing statement) within [ceiling/2, ceiling], ceiling = min(cap, base *
     2**(n-1)) as popagent_tasks.model.Backoff implements it; the bench moves each due time to
     "now" itself, so no delay is waited out. After max_attempts = 5: dead-letter, 5 errors.
  6  cancel a running task: a cooperative executor stops within 10 s; one that ignores the abort
     stays `cancelling` (reported interrupted, its slot held, nothing else runs in it) and is
     `cancelled` once it lets go, within abort_ack + sweep of that: a cancellation is durable only
     after the executor settled (the product's contract, stricter than the reliability table's
     "cancelled within abort_ack + sweep" of the cancel); no attempt runs after the cancel.
  7  3 scheduler replicas x 100 per-second ticks (a seconds-field cron written straight to the
     table: the API only takes minute crons), the replica that alone ticked first SIGKILLed at a
     tick once the others are ticking: exactly 100 tasks, 0 duplicate and 0 missed ticks.
  8  a paced soak with pg_terminate_backend on the workers' sessions, then a PostgreSQL restart:
     the faults hit attempts in flight (some ran again), every re-execution a new fenced attempt,
     0 lost; throughput back within 30 s of PostgreSQL being up.
  9  a JetStream handler that runs 2 x ack_wait, two consumers of one durable: side effects =
     unique Nats-Msg-Id count, deliveries of any message <= max_deliver.

    .venv/bin/python bench/task_queue_faults.py [--rows 1,2,5,6,7,8,9] [--workers 16]
        [--tasks 10000] [--kill-every-s 2] [--ticks 100] [--ack-wait-s 30] [--runs 3]

Every flag also reads BENCH_TQ_<FLAG> (BENCH_TQ_TASKS=2000, ...). The time rows (2, 6, 7, 8)
run `--runs` times (default 1; 3 for the record of their times).
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a plain script, this folder comes first on sys.path; keep it off (make bench uses -P)
# so no bench file can ever shadow a standard module.
BENCH_DIR = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != BENCH_DIR]
sys.path.insert(0, str(BENCH_DIR.parent))  # the benchmarks' shared `bench.helpers`
sys.path.insert(0, str(BENCH_DIR.parent / "tests"))  # the tests' worker processes and executor

import os  # noqa: E402

# Spawning workers forks while gRPC threads run; gRPC's notice about it is noise here.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

import argparse  # noqa: E402
import asyncio  # noqa: E402
import contextlib  # noqa: E402
import logging  # noqa: E402
import random  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from collections import Counter  # noqa: E402
from collections.abc import AsyncIterator, Awaitable, Callable  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from datetime import UTC, datetime, timedelta  # noqa: E402

import asyncpg  # noqa: E402
import uvloop  # noqa: E402
from nats.aio.msg import Msg  # noqa: E402

from bench.helpers.task_queue import Fleet, Servers, fleet, servers  # noqa: E402
from popagent_core import bus  # noqa: E402
from popagent_core.db import open_pool  # noqa: E402
from popagent_core.lifecycle import background_task  # noqa: E402
from popagent_tasks.model import Backoff  # noqa: E402
from popagent_tasks.repo import TaskRepo  # noqa: E402
from support.waiting import eventually  # noqa: E402

TERMINAL = ("completed", "failed", "cancelled", "dead-letter")

# The bench's own pool refills itself while row 8's PostgreSQL is down; each retry is expected, not news.
logging.getLogger("asyncpg.pool").setLevel(logging.ERROR)


@dataclass
class Verdict:
    """One figure of a row against its bar."""

    row: int
    what: str
    measured: str
    bar: str
    ok: bool

    def line(self) -> str:
        return f"  row {self.row}: {self.what}: {self.measured}  (bar {self.bar}: {'ok' if self.ok else 'MISSED'})"


@dataclass
class Report:
    verdicts: list[Verdict] = field(default_factory=list)

    def add(self, row: int, what: str, measured: object, bar: str, ok: bool) -> None:
        verdict = Verdict(row, what, str(measured), bar, ok)
        self.verdicts.append(verdict)
        print(verdict.line(), flush=True)


def note(text: str) -> None:
    print(f"  {text}", flush=True)


# -- shared figures --------------------------------------------------------------------------


async def counts(pool: asyncpg.Pool) -> dict[str, int]:
    rows = await pool.fetch(
        "SELECT status, count(*) AS n FROM popagent_agent_tasks WHERE kind = 'task' GROUP BY status"
    )
    return {row["status"]: row["n"] for row in rows}


async def wait_terminal(pool: asyncpg.Pool, total: int, within: float) -> dict[str, int]:
    """The states once at least `total` tasks exist and every one is terminal (a batch the enqueuer
    sent again after a commit whose answer the outage cut is one more batch to finish)."""
    return await eventually(
        lambda: counts(pool),
        until=lambda c: sum(c.values()) >= total and sum(c.get(s, 0) for s in TERMINAL) == sum(c.values()),
        within=within,
        interval=0.25,
        what=f"{total} tasks terminal",
    )


@dataclass
class Effects:
    """What ran, from the effects table and the task rows."""

    tasks: int
    completed: int
    with_effect: int
    effects: int
    duplicate_attempts: int  # (task, attempt) pairs that ran their effect twice: a fence failed
    reexecuted: int  # tasks that ran more than one attempt
    unfenced: int  # tasks whose effects name an attempt the row never handed out, or repeat one
    errors_short: int  # re-executed tasks with fewer than attempt_count - 1 recorded errors
    lost: int  # tasks not completed, or completed without their effect
    pids: int


async def effects_of(pool: asyncpg.Pool) -> Effects:
    row = await pool.fetchrow(
        """
        WITH per_task AS (
            SELECT t.id, t.status, t.attempt_count,
                count(e.task_id) AS effects, count(DISTINCT e.attempt) AS attempts, max(e.attempt) AS last_attempt,
                (SELECT count(*) FROM popagent_agent_task_progress p
                  WHERE p.task_id = t.id AND p.kind IN ('recovered', 'retry_scheduled')) AS errors
            FROM popagent_agent_tasks t LEFT JOIN public.task_effects e ON e.task_id = t.id
            WHERE t.kind = 'task'
            GROUP BY t.id
        )
        SELECT count(*) AS tasks,
            count(*) FILTER (WHERE status = 'completed') AS completed,
            count(*) FILTER (WHERE effects > 0) AS with_effect,
            coalesce(sum(effects), 0) AS effects,
            count(*) FILTER (WHERE attempt_count > 1) AS reexecuted,
            count(*) FILTER (WHERE effects <> attempts OR last_attempt > attempt_count) AS unfenced,
            count(*) FILTER (WHERE attempt_count > 1 AND errors < attempt_count - 1) AS errors_short,
            count(*) FILTER (WHERE status <> 'completed' OR effects = 0) AS lost
        FROM per_task
        """
    )
    duplicates = await pool.fetchval(
        "SELECT count(*) FROM (SELECT 1 FROM public.task_effects GROUP BY task_id, attempt HAVING count(*) > 1) d"
    )
    pids = await pool.fetchval("SELECT count(DISTINCT pid) FROM public.task_effects")
    assert row is not None
    return Effects(
        tasks=row["tasks"],
        completed=row["completed"],
        with_effect=row["with_effect"],
        effects=int(row["effects"]),
        duplicate_attempts=duplicates,
        reexecuted=row["reexecuted"],
        unfenced=row["unfenced"],
        errors_short=row["errors_short"],
        lost=row["lost"],
        pids=pids,
    )


def timing_env(args: argparse.Namespace) -> dict[str, str]:
    """Worker timing for the fault rows: recovery in seconds, not the production 20 s + 5 s; the
    heartbeat every tenth of its timeout, as in production (2 s of 20 s)."""
    return {
        "POPAGENT_TASKS_HEARTBEAT_INTERVAL_S": str(args.heartbeat_timeout_s / 10),
        "POPAGENT_TASKS_HEARTBEAT_TIMEOUT_S": str(args.heartbeat_timeout_s),
        "POPAGENT_TASKS_SWEEP_INTERVAL_S": str(args.sweep_interval_s),
        "POPAGENT_TASKS_POLL_INTERVAL_S": "0.5",
        "POPAGENT_TASKS_ABORT_ACK_S": str(args.abort_ack_s),
        "POPAGENT_TASKS_RETRY_BASE_S": "0.05",
        "POPAGENT_TASKS_RETRY_CAP_S": "0.5",
        "POPAGENT_TASKS_SHUTDOWN_GRACE_S": "1",
        "POPAGENT_TASKS_CONCURRENCY": str(args.concurrency),
        "POPAGENT_TASKS_SCHEDULER_ENABLED": "false",
        "POPAGENT_LOG_LEVEL": "INFO",
    }


@contextlib.asynccontextmanager
async def paced_enqueuer(
    pool: asyncpg.Pool, prompt: str, total: int, rate: float, max_attempts: int
) -> AsyncIterator[list[uuid.UUID]]:
    """Creates `total` tasks at `rate`/s in tenth-of-a-second batches; a batch that fails (the
    database is down) is tried again, so the schedule catches up once it is back."""
    created: list[uuid.UUID] = []
    repo = TaskRepo(pool)

    async def run() -> None:
        began = time.monotonic()
        while len(created) < total:
            due = min(total, int((time.monotonic() - began) * rate) + 1)
            if due > len(created):
                try:
                    created.extend(
                        await repo.create_tasks(
                            [prompt] * (due - len(created)),
                            source="user",
                            workspace_id="bench",
                            max_attempts=max_attempts,
                        )
                    )
                except Exception:
                    await asyncio.sleep(0.2)
                    continue
            await asyncio.sleep(0.1)

    async with background_task(run, name="enqueuer"):
        yield created


# -- row 1 -----------------------------------------------------------------------------------


async def row_1(servers_: Servers, args: argparse.Namespace, report: Report) -> None:
    """CI-sized: tests/tasks/test_processes.py::test_four_workers_complete_2000_tasks_exactly_once."""
    print(f"row 1: {args.workers} worker processes x {args.tasks:,} tasks, no faults", flush=True)
    dsn = await servers_.database("popagent_bench_tq_row1")
    with fleet(servers_, dsn, "row1", **timing_env(args)) as workers:
        await workers.start(args.workers)
        async with open_pool(dsn, "tasks", max_size=4) as pool:
            began = time.monotonic()
            await TaskRepo(pool).create_tasks(["effect"] * args.tasks, source="user", workspace_id="bench")
            await wait_terminal(pool, args.tasks, within=max(120.0, args.tasks / 20))
            elapsed = time.monotonic() - began
            effects = await effects_of(pool)
    note(f"{args.tasks / elapsed:,.0f} tasks/s; effects written by {effects.pids} of {args.workers} processes")
    report.add(
        1,
        "distinct tasks with an effect",
        f"{effects.with_effect:,}",
        f"= {args.tasks:,}",
        effects.with_effect == args.tasks,
    )
    duplicates = effects.effects - effects.with_effect
    report.add(1, "tasks run more than once", duplicates, "0", duplicates == 0 and effects.reexecuted == 0)
    report.add(1, "lost tasks", effects.lost, "0", effects.lost == 0)


# -- row 2 -----------------------------------------------------------------------------------


@dataclass
class Kill:
    pid: int
    at: datetime  # database clock, read just before the signal
    orphans: list[tuple[uuid.UUID, int]]  # (task, attempt) the victim held


async def kill_loop(workers: Fleet, pool: asyncpg.Pool, every_s: float, kills: list[Kill], rng: random.Random) -> None:
    while True:
        await asyncio.sleep(every_s)
        at = await pool.fetchval("SELECT clock_timestamp()")
        victim = workers.kill_one(rng)
        # The victim is dead: whatever it still holds in the table is orphaned, and stays so until a sweep.
        orphans = await pool.fetch(
            "SELECT id, attempt_count FROM popagent_agent_tasks"
            " WHERE status IN ('running', 'cancelling') AND claimed_by LIKE $1",
            f"%:{victim.pid}:%",
        )
        kills.append(Kill(victim.pid, at, [(r["id"], r["attempt_count"]) for r in orphans]))
        workers.spawn()  # a replacement, as a supervisor would start one


async def row_2(servers_: Servers, args: argparse.Namespace, report: Report, run: int) -> None:
    """CI-sized: tests/tasks/test_processes.py::test_a_sigkilled_workers_task_is_recovered_by_staleness_and_completed_elsewhere."""
    run_s = 0.2
    print(
        f"row 2 (run {run}): {args.workers} workers x {args.tasks:,} tasks at {args.rate:.0f}/s (each {run_s} s),"
        f" SIGKILL a random worker every {args.kill_every_s:g} s",
        flush=True,
    )
    dsn = await servers_.database(f"popagent_bench_tq_row2_{run}")
    rng = random.Random(run)
    kills: list[Kill] = []
    with fleet(servers_, dsn, f"row2-{run}", **timing_env(args)) as workers:
        await workers.start(args.workers)
        async with open_pool(dsn, "tasks", max_size=4) as pool:
            async with (
                paced_enqueuer(pool, f"effect;hang:{run_s}", args.tasks, args.rate, max_attempts=10) as created,
                background_task(lambda: kill_loop(workers, pool, args.kill_every_s, kills, rng), name="killer"),
            ):
                await eventually(lambda: len(created) == args.tasks, within=args.tasks / args.rate + 60, interval=0.5)
            final = await wait_terminal(pool, args.tasks, within=120)
            effects = await effects_of(pool)
            orphaned = [(kill, task_id, attempt) for kill in kills for task_id, attempt in kill.orphans]
            recovered_after: list[float] = []
            terminal_after: list[float] = []
            orphaned_again = 0
            slowest = (0.0, 0.0, 0.0)
            for kill, task_id, attempt in orphaned:
                recovered_at = await pool.fetchval(
                    "SELECT min(created_at) FROM popagent_agent_task_progress"
                    " WHERE task_id = $1 AND attempt = $2 AND kind = 'recovered'",
                    task_id,
                    attempt,
                )
                recovered_after.append((recovered_at - kill.at).total_seconds() if recovered_at else float("inf"))
                final_attempt, started_at, finished_at = await pool.fetchrow(
                    "SELECT attempt_count, started_at, finished_at FROM popagent_agent_tasks WHERE id = $1", task_id
                )
                if final_attempt == attempt + 1:
                    terminal_after.append((finished_at - kill.at).total_seconds())
                    # Where the time of the slowest went: requeue, the rerun's claim, its end.
                    if terminal_after[-1] == max(terminal_after):
                        slowest = (recovered_after[-1], (started_at - kill.at).total_seconds(), terminal_after[-1])
                else:  # its rerun's worker was killed too: that kill's own figures count it
                    orphaned_again += 1
    horizon = args.heartbeat_timeout_s + args.sweep_interval_s
    note(
        f"{len(kills)} kills, {len(orphaned)} attempts orphaned by them ({orphaned_again} of whose reruns"
        f" were orphaned again); final states {final}; the slowest orphan: requeued +{slowest[0]:.2f} s,"
        f" rerun claimed +{slowest[1]:.2f} s, terminal +{slowest[2]:.2f} s after the kill"
    )
    report.add(
        2,
        "kills that orphaned work in flight",
        sum(1 for k in kills if k.orphans),
        ">= 1",
        any(k.orphans for k in kills),
    )
    report.add(2, "lost tasks", effects.lost, "0", effects.lost == 0)
    report.add(2, "(task, attempt) run twice", effects.duplicate_attempts, "0", effects.duplicate_attempts == 0)
    report.add(
        2,
        "re-executions that are not a new fenced attempt / lack their recorded error",
        f"{effects.unfenced} / {effects.errors_short} (of {effects.reexecuted} re-executed tasks)",
        "0 / 0",
        effects.unfenced == 0 and effects.errors_short == 0,
    )
    worst_recovery = max(recovered_after, default=0.0)
    report.add(
        2,
        "kill -> orphan requeued, max",
        f"{worst_recovery:.2f} s",
        f"<= heartbeat timeout + sweep = {horizon:g} s",
        bool(orphaned) and worst_recovery <= horizon,
    )
    worst_terminal = max(terminal_after, default=0.0)
    report.add(
        2,
        "kill -> orphan terminal, max",
        f"{worst_terminal:.2f} s",
        f"<= {horizon:g} s + its {run_s} s run",
        bool(orphaned) and worst_terminal <= horizon + run_s,
    )


# -- row 5 -----------------------------------------------------------------------------------


async def row_5(servers_: Servers, args: argparse.Namespace, report: Report) -> None:
    """CI-sized: tests/tasks/test_worker.py::test_five_failures_dead_letter_with_five_errors_and_bounded_backoff."""
    base, cap, max_attempts, n = 100.0, 500.0, 5, args.backoff_tasks
    backoff = Backoff(base, cap)
    print(
        f"row 5: {n} self-update tasks failing every attempt (max_attempts {max_attempts}), base {base:g} s,"
        f" cap {cap:g} s, the clock moved on by the bench",
        flush=True,
    )
    dsn = await servers_.database("popagent_bench_tq_row5")
    env = {**timing_env(args), "POPAGENT_TASKS_RETRY_BASE_S": str(base), "POPAGENT_TASKS_RETRY_CAP_S": str(cap)}
    ratios: dict[int, list[float]] = {}
    with fleet(servers_, dsn, "row5", **env) as workers:
        await workers.start(2)
        async with open_pool(dsn, "tasks", max_size=4) as pool:
            await TaskRepo(pool).create_tasks(
                ["fail:provider"] * n, source="self-update", workspace_id="bench", max_attempts=max_attempts
            )
            for attempt in range(1, max_attempts + 1):
                settled = "dead-letter" if attempt == max_attempts else "queued"
                await eventually(
                    lambda a=attempt, s=settled: pool.fetchval(
                        "SELECT count(*) FROM popagent_agent_tasks WHERE kind = 'task' AND attempt_count = $1"
                        " AND status = $2",
                        a,
                        s,
                    ),
                    until=lambda done: done == n,
                    within=120,
                    interval=0.2,
                    what=f"every task's attempt {attempt} to fail",
                )
                if attempt == max_attempts:
                    break
                # Both times come from the failing statement (clock_timestamp() twice in one UPDATE).
                delays = await pool.fetch(
                    "SELECT extract(epoch FROM next_attempt_at - finished_at)::float8 AS s FROM popagent_agent_tasks"
                    " WHERE kind = 'task'"
                )
                ratios[attempt] = [row["s"] / backoff.ceiling(attempt) for row in delays]
                # The controlled clock: every retry is due now.
                await pool.execute(
                    "UPDATE popagent_agent_tasks SET next_attempt_at = clock_timestamp()"
                    " WHERE kind = 'task' AND status = 'queued'"
                )
            errors = await pool.fetch(
                "SELECT t.id, count(p.*) AS n FROM popagent_agent_tasks t JOIN popagent_agent_task_progress p"
                " ON p.task_id = t.id AND p.kind IN ('retry_scheduled', 'dead_letter') WHERE t.kind = 'task' GROUP BY t.id"
            )
            dead = (await counts(pool)).get("dead-letter", 0)
    # Two clock_timestamp() calls of one statement are microseconds apart.
    tolerance = 0.001
    for attempt, values in ratios.items():
        ceiling = backoff.ceiling(attempt)
        note(
            f"after attempt {attempt}: ceiling {ceiling:g} s, delay/ceiling min {min(values):.3f}"
            f" max {max(values):.3f} over {len(values)} retries"
        )
    inside = all(
        ceiling / 2 - tolerance <= r * ceiling <= ceiling + tolerance
        for attempt, values in ratios.items()
        for ceiling in [backoff.ceiling(attempt)]
        for r in values
    )
    spread = min(min(v) for v in ratios.values()), max(max(v) for v in ratios.values())
    report.add(
        5,
        f"retry delays within [ceiling/2, ceiling] ({sum(map(len, ratios.values()))} delays)",
        f"delay/ceiling in [{spread[0]:.3f}, {spread[1]:.3f}]",
        "[0.5, 1.0]",
        inside,
    )
    report.add(5, "dead-lettered after 5 attempts", f"{dead}/{n}", f"{n}/{n}", dead == n)
    per_task = Counter(row["n"] for row in errors)
    report.add(5, "errors recorded per task", dict(per_task), f"{{5: {n}}}", per_task == Counter({5: n}))


# -- row 6 -----------------------------------------------------------------------------------


async def cancel_all(pool: asyncpg.Pool, prompt: str, n: int, hang_s: float) -> tuple[list[float], int, int]:
    """Start `n` tasks, cancel each once running; cancel -> cancelled per task, then (after the
    executors would have ended by themselves) the attempts and effects that exist."""
    repo = TaskRepo(pool)
    ids = await repo.create_tasks([prompt] * n, source="user", workspace_id="bench")
    await eventually(
        lambda: pool.fetchval("SELECT count(*) FROM public.task_effects"), until=lambda c: c == n, within=60
    )
    running_since = time.monotonic()
    for task_id in ids:
        await repo.cancel_task(str(task_id))
    await wait_terminal(pool, n, within=hang_s + 60)
    rows = await pool.fetch(
        "SELECT status, extract(epoch FROM finished_at - cancel_requested_at)::float8 AS s FROM popagent_agent_tasks"
    )
    latencies = [row["s"] for row in rows if row["status"] == "cancelled"]
    # An attempt after the cancel would start once its executor let go of the slot; wait that out and look again.
    await asyncio.sleep(max(running_since + hang_s + 2 - time.monotonic(), 0))
    attempts = await pool.fetchval("SELECT count(*) FROM popagent_agent_tasks WHERE attempt_count <> 1")
    effects = await pool.fetchval("SELECT count(*) FROM public.task_effects")
    return latencies + [float("inf")] * (n - len(latencies)), attempts, effects - n


async def row_6(servers_: Servers, args: argparse.Namespace, report: Report, run: int) -> None:
    """CI-sized: tests/tasks/test_recovery.py::test_an_executor_that_ignores_cancel_keeps_its_slot_until_it_settles."""
    n, hang_s = 20, 15.0
    print(f"row 6 (run {run}): cancel {n} running tasks, cooperative and ignoring the abort ({hang_s:g} s)", flush=True)
    for variant, prompt, bar_s in (
        ("cooperative", f"effect;sleep:{hang_s}", 10.0),
        # Durable only once the executor lets go (it hangs `hang_s` from its start, a little before the cancel).
        ("ignores the abort", f"effect;hang:{hang_s}", hang_s + args.abort_ack_s + args.sweep_interval_s),
    ):
        dsn = await servers_.database(f"popagent_bench_tq_row6_{run}")
        with fleet(servers_, dsn, f"row6-{run}", **timing_env(args)) as workers:
            await workers.start(2)
            async with open_pool(dsn, "tasks", max_size=4) as pool:
                latencies, extra_attempts, extra_effects = await cancel_all(pool, prompt, n, hang_s)
        worst = max(latencies)
        # A worker hears of a cancel through its next heartbeat; an executor that ignores the abort is
        # reported interrupted after abort_ack and its cancellation is stored once it settles.
        bar = f"<= {bar_s:g} s" + ("" if variant == "cooperative" else " (its settling + abort ack + sweep)")
        report.add(6, f"{variant}: cancel -> cancelled, max of {n}", f"{worst:.2f} s", bar, worst <= bar_s)
        report.add(
            6,
            f"{variant}: attempts / effects after the cancel",
            f"{extra_attempts} / {extra_effects}",
            "0 / 0",
            extra_attempts == 0 and extra_effects == 0,
        )


# -- row 7 -----------------------------------------------------------------------------------


async def row_7(servers_: Servers, args: argparse.Namespace, report: Report, run: int) -> None:
    """CI-sized: tests/tasks/test_processes.py::test_a_ticking_scheduler_replica_killed_mid_run_misses_and_doubles_no_tick."""
    ticks = args.ticks
    print(
        f"row 7 (run {run}): 3 scheduler replicas x {ticks} per-second ticks, the first replica killed mid-run",
        flush=True,
    )
    dsn = await servers_.database(f"popagent_bench_tq_row7_{run}")
    env = {**timing_env(args), "POPAGENT_TASKS_SCHEDULER_ENABLED": "true", "POPAGENT_TASKS_TIMEZONE": "UTC"}
    with fleet(servers_, dsn, f"row7-{run}", **env) as replicas:
        async with open_pool(dsn, "tasks", max_size=4) as pool:
            figures = await ticking_replicas(pool, replicas, ticks, rng=random.Random(run))
    report.add(7, "tasks for the ticks", figures.tasks, f"= {ticks}", figures.tasks == ticks)
    report.add(7, "duplicate (schedule_id, tick)", figures.duplicates, "0", figures.duplicates == 0)
    report.add(7, "missed ticks", figures.missed, "0", figures.missed == 0)
    note(
        f"victim killed {figures.killed_after_ticks} ticks in; tick -> task max {figures.worst_lateness_s:.2f} s"
        f" ({figures.late_after_kill_s:.2f} s for the first tick after the kill)"
    )


@dataclass
class TickFigures:
    tasks: int
    duplicates: int
    missed: int
    killed_after_ticks: int
    worst_lateness_s: float
    late_after_kill_s: float


async def ticking_replicas(pool: asyncpg.Pool, replicas: Fleet, ticks: int, rng: random.Random) -> TickFigures:
    """The CI test's shape at full scale: one replica ticks alone first (the leader by construction),
    two more join and tick, the first is SIGKILLed just as a tick falls due."""
    first = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=8)
    schedule_id = await pool.fetchval(
        "INSERT INTO popagent_agent_schedules (source, workspace_id, name, prompt, model, session_id, cron,"
        " timezone, next_run_at, enabled, max_attempts)"
        " VALUES ('user', 'bench', 'every second', 'ok', 'm/x', 's', '* * * * * *', 'UTC', $1, true, 1) RETURNING id",
        first,
    )
    materialized = "SELECT count(*) FROM popagent_agent_tasks WHERE schedule_id = $1"
    [leader] = await replicas.start(1)
    await eventually(lambda: pool.fetchval(materialized, schedule_id), until=lambda c: c >= 3, within=30, interval=0.1)
    await replicas.start(2)
    # Mid-run, and after the joined replicas ticked too.
    kill_at = max(await pool.fetchval(materialized, schedule_id) + 3, ticks // 2)
    await eventually(
        lambda: pool.fetchval(materialized, schedule_id), until=lambda c: c >= kill_at, within=ticks + 30, interval=0.1
    )
    # Killed as the next tick falls due, when every replica is about to take it.
    now = datetime.now(UTC)
    await asyncio.sleep(1 - now.microsecond / 1e6 + rng.uniform(0, 0.02))
    replicas.kill(leader)
    killed_at = datetime.now(UTC)
    killed_after = await pool.fetchval(materialized, schedule_id)
    last = first + timedelta(seconds=ticks - 1)
    await asyncio.sleep(max((last - datetime.now(UTC)).total_seconds(), 0) + 2)
    await pool.execute("UPDATE popagent_agent_schedules SET enabled = false WHERE id = $1", schedule_id)
    rows = await pool.fetch(
        "SELECT tick, created_at FROM popagent_agent_tasks WHERE schedule_id = $1 AND tick <= $2", schedule_id, last
    )
    seen = Counter(row["tick"] for row in rows)
    expected = {first + timedelta(seconds=i) for i in range(ticks)}
    lateness = [(row["created_at"] - row["tick"]).total_seconds() for row in rows]
    after_kill = [
        (row["created_at"] - row["tick"]).total_seconds()
        for row in rows
        if row["tick"] >= killed_at.replace(microsecond=0)
    ]
    return TickFigures(
        tasks=len(rows),
        duplicates=sum(n - 1 for n in seen.values()),
        missed=len(expected - set(seen)),
        killed_after_ticks=killed_after,
        worst_lateness_s=max(lateness, default=0.0),
        late_after_kill_s=after_kill[0] if after_kill else float("nan"),
    )


# -- row 8 -----------------------------------------------------------------------------------


async def completions_per_s(pool: asyncpg.Pool, since: datetime) -> list[tuple[float, int]]:
    rows = await pool.fetch(
        "SELECT floor(extract(epoch FROM finished_at - $1))::int AS second, count(*) AS n FROM popagent_agent_tasks"
        " WHERE status = 'completed' GROUP BY 1 ORDER BY 1",
        since,
    )
    return [(row["second"], row["n"]) for row in rows]


async def database_clock_once_up(pool: asyncpg.Pool, within: float = 30.0) -> datetime:
    """The database's clock as soon as the pool reaches it again (its old sessions died with the server)."""
    deadline = time.monotonic() + within
    while True:
        try:
            return await pool.fetchval("SELECT clock_timestamp()")
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


async def row_8(servers_: Servers, args: argparse.Namespace, report: Report, run: int) -> None:
    """CI-sized: tests/tasks/test_processes.py::test_severed_database_sessions_lose_and_duplicate_nothing and
    ::test_a_postgres_restart_mid_soak_reruns_interrupted_attempts_fenced_and_loses_nothing."""
    n, rate, workers_n = args.soak_tasks, args.soak_rate, args.soak_workers
    down_s = 3.0
    print(
        f"row 8 (run {run}): {workers_n} workers, {n:,} tasks at {rate:.0f}/s; pg_terminate_backend x3, then"
        f" PostgreSQL down {down_s:g} s",
        flush=True,
    )
    dsn = await servers_.database(f"popagent_bench_tq_row8_{run}")
    database = f"popagent_bench_tq_row8_{run}"
    terminated = 0
    with fleet(servers_, dsn, f"row8-{run}", **timing_env(args)) as workers:
        await workers.start(workers_n)
        async with open_pool(dsn, "tasks", max_size=4) as pool:
            began_at = await pool.fetchval("SELECT clock_timestamp()")
            # The effect comes after a pause: an attempt running at the stop writes it during the outage.
            async with paced_enqueuer(pool, "hang:0.3;effect", n, rate, max_attempts=10) as created:
                soak_s = n / rate
                await asyncio.sleep(soak_s * 0.25)
                for _ in range(3):
                    terminated += len(
                        await pool.fetch(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                            " WHERE datname = $1 AND application_name = 'popagent-tasks'",
                            database,
                        )
                    )
                    await asyncio.sleep(0.5)
                await asyncio.sleep(soak_s * 0.2)
                running = (await counts(pool)).get("running", 0)
                stopped_at = time.monotonic()
                servers_.postgres.stop()
                await asyncio.sleep(down_s)
                servers_.postgres.start()
                up_at = time.monotonic()
                up_clock = await database_clock_once_up(pool)
                await eventually(lambda: len(created) == n, within=soak_s + 120, interval=0.5)
            final = await wait_terminal(pool, n, within=120)
            effects = await effects_of(pool)
            timeline = await completions_per_s(pool, began_at)
            not_completed = await pool.fetch(
                "SELECT status, last_error_class, left(last_error, 120) AS error, attempt_count, count(*) AS n"
                " FROM popagent_agent_tasks WHERE kind = 'task' AND status <> 'completed' GROUP BY 1, 2, 3, 4"
            )
    transition_retries = sum(p.log_text().count("task transition failed; retrying") for p in workers.processes)
    up_second = int((up_clock - began_at).total_seconds())
    back_s = next(
        (second - up_second + 1 for second, done in timeline if second >= up_second and done >= 0.8 * rate), None
    )
    note(
        f"{terminated} sessions terminated; {running} attempts running when PostgreSQL stopped"
        f" ({up_at - stopped_at:.1f} s down); {transition_retries} transitions retried through it;"
        f" {effects.reexecuted} tasks ran again; final states {final}"
        + "".join(
            f"; {r['n']} {r['status']} (attempt {r['attempt_count']}, {r['last_error_class']}: {r['error']})"
            for r in not_completed
        )
    )
    report.add(
        8, "faults that hit attempts in flight (tasks re-executed)", effects.reexecuted, ">= 1", effects.reexecuted >= 1
    )
    report.add(8, "lost tasks", effects.lost, "0", effects.lost == 0)
    report.add(8, "(task, attempt) run twice", effects.duplicate_attempts, "0", effects.duplicate_attempts == 0)
    report.add(
        8,
        "re-executions that are not a new fenced attempt / lack their recorded error",
        f"{effects.unfenced} / {effects.errors_short}",
        "0 / 0",
        effects.unfenced == 0 and effects.errors_short == 0,
    )
    report.add(
        8,
        "PostgreSQL up -> completions back to 80% of the pace",
        "never" if back_s is None else f"<= {back_s} s",
        "<= 30 s",
        back_s is not None and back_s <= 30,
    )


# -- row 9 -----------------------------------------------------------------------------------


async def row_9(servers_: Servers, args: argparse.Namespace, report: Report) -> None:
    """CI-sized: tests/core/test_outbox.py::test_a_handler_running_twice_ack_wait_has_one_effect_and_no_redelivery."""
    ack_wait_s, max_deliver, n, slow_every = args.ack_wait_s, 10, args.messages, args.slow_every
    slow = len(range(0, n, slow_every))
    print(
        f"row 9: {n} messages, {slow} of them handled for 2 x ack_wait ({2 * ack_wait_s:g} s), two consumers"
        f" of one durable, max_deliver {max_deliver}",
        flush=True,
    )
    subject = f"popagent.tasks.benchack.m{uuid.uuid4().hex[:8]}"
    durable = f"bench-ack-{uuid.uuid4().hex[:8]}"
    effects: Counter[str] = Counter()
    deliveries: dict[str, int] = {}

    async def handler(msg: Msg) -> None:
        msg_id = (msg.headers or {})["Nats-Msg-Id"]
        deliveries[msg_id] = max(deliveries.get(msg_id, 0), msg.metadata.num_delivered)
        if int(msg.data) % slow_every == 0:
            await asyncio.sleep(2 * ack_wait_s)
        effects[msg_id] += 1  # the side effect, once the handler's work is done

    def consumer() -> Awaitable[None]:
        return bus.consume(
            js, subject=subject, durable=durable, handler=handler, ack_wait_s=ack_wait_s, max_deliver=max_deliver
        )

    async with bus.connect(servers_.nats_url, name="bench-task-queue") as nc:
        js = nc.jetstream()
        await bus.ensure_streams(js, ("tasks",))
        ids = [uuid.uuid4().hex for _ in range(n)]
        for index, msg_id in enumerate(ids):
            await js.publish(subject, str(index).encode(), headers={"Nats-Msg-Id": msg_id})
        stream = "POPAGENT_TASKS"
        began = time.monotonic()
        async with background_task(consumer, name="consumer-1"), background_task(consumer, name="consumer-2"):

            async def settled() -> bool:
                if len(effects) < n:  # (the consumer may not exist yet either)
                    return False
                info = await js.consumer_info(stream, durable)
                return info.num_ack_pending == 0 and info.num_pending == 0

            await eventually(settled, within=slow * 2 * ack_wait_s + 120, interval=0.5, what="every message acked")
            elapsed = time.monotonic() - began
            await asyncio.sleep(ack_wait_s * 1.5)  # a redelivery would have come by now
            info = await js.consumer_info(stream, durable)
        await js.delete_consumer(stream, durable)
    doubled = sum(1 for count in effects.values() if count > 1)
    note(f"all handled in {elapsed:.1f} s; consumer reports {info.num_redelivered} redelivered")
    report.add(
        9,
        "side effects / unique Nats-Msg-Id",
        f"{sum(effects.values())} / {len(set(ids))}",
        "equal",
        sum(effects.values()) == len(set(ids)) and set(effects) == set(ids),
    )
    report.add(9, "messages with a double effect", doubled, "0", doubled == 0)
    worst = max(deliveries.values(), default=0)
    report.add(9, "deliveries of a message, max", worst, f"<= max_deliver = {max_deliver}", worst <= max_deliver)


# -- main ------------------------------------------------------------------------------------

ROWS: dict[int, Callable[[Servers, argparse.Namespace, Report, int], Awaitable[None]]] = {
    1: lambda s, a, r, _: row_1(s, a, r),
    2: row_2,
    5: lambda s, a, r, _: row_5(s, a, r),
    6: row_6,
    7: row_7,
    8: row_8,
    9: lambda s, a, r, _: row_9(s, a, r),
}
TIMED_ROWS = {2, 6, 7, 8}


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)

    def option(name: str, kind: Callable[[str], object], default: object, text: str) -> None:
        env = "BENCH_TQ_" + name.upper().replace("-", "_")
        value = kind(os.environ.get(env, str(default)))
        parser.add_argument(f"--{name}", type=kind, default=value, help=f"{text} ({env})")

    option("rows", str, "1,2,5,6,7,8,9", "the rows to run, comma-separated")
    option("runs", int, 1, "runs of each time row (2, 6, 7, 8)")
    option("workers", int, 16, "worker processes of rows 1 and 2")
    option("concurrency", int, 16, "attempts per worker process")
    option("tasks", int, 10_000, "tasks of rows 1 and 2")
    option("rate", float, 250.0, "tasks per second enqueued in row 2")
    option("kill-every-s", float, 2.0, "row 2: seconds between SIGKILLs")
    option("heartbeat-timeout-s", float, 5.0, "heartbeat staleness that orphans an attempt")
    option("sweep-interval-s", float, 1.0, "seconds between recovery sweeps")
    option("abort-ack-s", float, 1.0, "how long an aborted executor gets to settle")
    option("backoff-tasks", int, 200, "row 5: tasks failing through their attempts")
    option("ticks", int, 100, "row 7: per-second schedule ticks")
    option("soak-workers", int, 4, "row 8: worker processes")
    option("soak-tasks", int, 6000, "row 8: tasks")
    option("soak-rate", float, 150.0, "row 8: tasks per second")
    option("messages", int, 200, "row 9: messages")
    option("slow-every", int, 50, "row 9: every Nth message is handled for 2 x ack_wait")
    option("ack-wait-s", float, 30.0, "row 9: the consumer's ack_wait (JetStream's default 30 s)")
    return parser.parse_args()


async def run(args: argparse.Namespace) -> None:
    rows = [int(row) for row in args.rows.split(",") if row.strip()]
    report = Report()
    async with servers() as servers_:
        for row in rows:
            for run_number in range(1, (args.runs if row in TIMED_ROWS else 1) + 1):
                await ROWS[row](servers_, args, report, run_number)
    missed = [v for v in report.verdicts if not v.ok]
    print(f"task queue: {len(report.verdicts) - len(missed)} of {len(report.verdicts)} figures within their bar")
    for verdict in missed:
        print("MISSED" + verdict.line())


def main() -> None:
    uvloop.run(run(arguments()))


if __name__ == "__main__":
    main()
