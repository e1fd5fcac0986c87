"""Several worker processes over one real PostgreSQL: exactly-once under contention,
SIGKILL and SIGSTOP of a worker mid-task, graceful SIGTERM, severed database sessions, a
PostgreSQL restart, and cron uniqueness across scheduler replicas."""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import time
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import pytest

from popagent_core.db import open_pool
from popagent_core.migrate import migrate
from popagent_dev.embedded import StoppablePostgres, ensure_database, stoppable_postgres
from popagent_tasks.repo import TaskRepo
from support.waiting import eventually
from tasks.executors import EFFECTS_TABLE
from tasks.harness import FAST_ENV, TASKS_MIGRATIONS, tasks_env
from tasks.processes import WorkerProcess

pytestmark = pytest.mark.xdist_group("tasks-processes")

Spawn = Callable[..., WorkerProcess]


@pytest.fixture
async def repo(tasks_dsn: str) -> AsyncIterator[TaskRepo]:
    async with open_pool(tasks_dsn, "tasks", max_size=4) as pool:
        await pool.execute(EFFECTS_TABLE)
        yield TaskRepo(pool)


@pytest.fixture
def spawn(
    tasks_dsn: str, nats_url: str, internal_credentials: tuple[dict[str, str], str], tmp_path: Path
) -> Iterator[Spawn]:
    _, callers = internal_credentials
    started: list[WorkerProcess] = []

    def start(**env: str) -> WorkerProcess:
        worker_env = tasks_env(tasks_dsn, nats_url, callers, **{**FAST_ENV, **env})
        process = WorkerProcess(worker_env, tmp_path / f"worker-{len(started)}.log")
        started.append(process)
        return process

    yield start
    for process in started:
        process.signal(signal.SIGCONT)
        process.stop()


async def counts(pool: asyncpg.Pool) -> dict[str, int]:
    rows = await pool.fetch("SELECT status, count(*) AS n FROM popagent_agent_tasks GROUP BY status")
    return {row["status"]: row["n"] for row in rows}


async def wait_all(pool: asyncpg.Pool, total: int, status: str = "completed", within: float = 60) -> None:
    await eventually(lambda: counts(pool), until=lambda c: c.get(status, 0) == total, within=within, interval=0.1)


@pytest.mark.timeout(120)
async def test_four_workers_complete_2000_tasks_exactly_once(repo: TaskRepo, spawn: Spawn) -> None:
    """RELIABILITY #1: no task lost, none run twice, work spread over the processes."""
    workers = [spawn(POPAGENT_TASKS_CONCURRENCY="16") for _ in range(4)]
    for worker in workers:
        await worker.wait_ready()

    ids = await repo.create_tasks(["effect"] * 2000, source="user", workspace_id="ws-1")
    await wait_all(repo.pool, 2000)

    pool = repo.pool
    assert await pool.fetchval("SELECT count(DISTINCT task_id) FROM public.task_effects") == 2000
    assert await pool.fetchval("SELECT count(*) FROM public.task_effects") == 2000
    assert await pool.fetchval("SELECT count(*) FROM popagent_agent_tasks WHERE attempt_count <> 1") == 0
    assert set(await pool.fetchval("SELECT array_agg(task_id) FROM public.task_effects")) == set(ids)
    pids = {row["pid"] for row in await pool.fetch("SELECT DISTINCT pid FROM public.task_effects")}
    assert pids <= {w.pid for w in workers} and len(pids) >= 2


@pytest.mark.timeout(90)
async def test_a_sigkilled_workers_task_is_recovered_by_staleness_and_completed_elsewhere(
    repo: TaskRepo, spawn: Spawn
) -> None:
    """RELIABILITY #2: a new fenced attempt, one error recorded, terminal within horizon + sweep."""
    victim = spawn(POPAGENT_TASKS_CONCURRENCY="1")
    await victim.wait_ready()
    [task_id] = await repo.create_tasks(["effect;hang-below:2:60;ok"], source="user", workspace_id="ws-1")
    await eventually(lambda: repo.pool.fetchval("SELECT count(*) FROM public.task_effects WHERE task_id = $1", task_id))
    rescuer = spawn()
    await rescuer.wait_ready()

    victim.signal(signal.SIGKILL)
    killed_at = time.monotonic()
    row = await eventually(
        lambda: repo.pool.fetchrow("SELECT * FROM popagent_agent_tasks WHERE id = $1", task_id),
        until=lambda r: r["status"] == "completed",
        within=30,
    )

    horizon = float(FAST_ENV["POPAGENT_TASKS_HEARTBEAT_TIMEOUT_S"]) + float(FAST_ENV["POPAGENT_TASKS_SWEEP_INTERVAL_S"])
    assert time.monotonic() - killed_at <= horizon + 3
    assert row["attempt_count"] == 2
    effects = await repo.pool.fetch(
        "SELECT attempt, pid FROM public.task_effects WHERE task_id = $1 ORDER BY attempt", task_id
    )
    assert [(e["attempt"], e["pid"]) for e in effects] == [(1, victim.pid), (2, rescuer.pid)]
    kinds = [
        r["kind"]
        for r in await repo.pool.fetch(
            "SELECT kind FROM popagent_agent_task_progress WHERE task_id = $1 ORDER BY id", task_id
        )
    ]
    assert kinds == ["recovered"]


@pytest.mark.timeout(90)
async def test_a_paused_workers_late_completion_changes_nothing(repo: TaskRepo, spawn: Spawn) -> None:
    """RELIABILITY #3 across processes: SIGSTOP past the horizon, reclaim, SIGCONT, stale completion."""
    paused = spawn(POPAGENT_TASKS_CONCURRENCY="1")
    await paused.wait_ready()
    [task_id] = await repo.create_tasks(["effect;hang-below:2:2;ok"], source="user", workspace_id="ws-1")
    await eventually(lambda: repo.pool.fetchval("SELECT count(*) FROM public.task_effects WHERE task_id = $1", task_id))
    paused.signal(signal.SIGSTOP)
    rescuer = spawn()
    await rescuer.wait_ready()
    done = await eventually(
        lambda: repo.pool.fetchrow("SELECT * FROM popagent_agent_tasks WHERE id = $1", task_id),
        until=lambda r: r["status"] == "completed",
        within=30,
    )

    paused.signal(signal.SIGCONT)
    await eventually(
        paused.log_text,
        until=lambda text: "stale attempt's transition changed nothing" in text or "lost its claim" in text,
        within=15,
    )
    await asyncio.sleep(0.5)

    after = await repo.pool.fetchrow("SELECT * FROM popagent_agent_tasks WHERE id = $1", task_id)
    assert (after["status"], after["attempt_count"], after["finished_at"]) == ("completed", 2, done["finished_at"])
    assert after["claimed_by"] == done["claimed_by"] and str(rescuer.pid) in after["claimed_by"]


# Long enough for the short tasks to finish on a loaded machine, short of the long ones' 60 s: the
# worker must end them at its grace, not wait for them. How soon it exits after SIGTERM is
# bench/graceful_stop.py's figure (RELIABILITY #10), not a timed assertion here.
SIGTERM_GRACE_S = 10


@pytest.mark.timeout(120)
async def test_sigterm_finishes_short_work_and_requeues_the_rest(repo: TaskRepo, spawn: Spawn) -> None:
    """RELIABILITY #10: work that ends within the grace finishes, the rest is requeued; 0 lost runs."""
    worker = spawn(POPAGENT_TASKS_CONCURRENCY="100", POPAGENT_TASKS_SHUTDOWN_GRACE_S=str(SIGTERM_GRACE_S))
    await worker.wait_ready()
    short = await repo.create_tasks(["hang:0.3;ok"] * 50, source="user", workspace_id="ws-1")
    long = await repo.create_tasks(["sleep:60"] * 50, source="user", workspace_id="ws-1")
    await eventually(
        lambda: counts(repo.pool), until=lambda c: c.get("running", 0) + c.get("completed", 0) == 100, within=30
    )

    worker.signal(signal.SIGTERM)
    # Well before the long tasks' 60 s end: it exits at its grace rather than waiting for them.
    await eventually(lambda: worker.process.poll() is not None, within=SIGTERM_GRACE_S + 30, what="the worker to exit")

    assert worker.process.returncode == 0, worker.log_text()[-3000:]
    statuses = dict(
        await repo.pool.fetch("SELECT id, status FROM popagent_agent_tasks WHERE id = ANY($1::uuid[])", short + long)
    )
    assert {statuses[i] for i in short} == {"completed"}
    assert {statuses[i] for i in long} == {"queued"}, worker.log_text()[-3000:]


@pytest.mark.timeout(120)
async def test_severed_database_sessions_lose_and_duplicate_nothing(repo: TaskRepo, spawn: Spawn, pg_dsn: str) -> None:
    """RELIABILITY #8 (pg_terminate_backend part): every task completes; no (task, attempt) runs twice."""
    workers = [spawn(POPAGENT_TASKS_CONCURRENCY="8") for _ in range(2)]
    for worker in workers:
        await worker.wait_ready()
    database = await repo.pool.fetchval("SELECT current_database()")
    await repo.create_tasks(["effect;hang:0.01"] * 400, source="user", workspace_id="ws-1")

    admin = await asyncpg.connect(pg_dsn)
    try:
        for _ in range(6):
            await asyncio.sleep(0.3)
            await admin.fetch(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = $1 AND application_name = 'popagent-tasks'",
                database,
            )
    finally:
        await admin.close()
    await wait_all(repo.pool, 400, within=60)
    assert [w.process.poll() for w in workers] == [None, None], "a worker died of a severed session"

    pool = repo.pool
    assert await pool.fetchval("SELECT count(DISTINCT task_id) FROM public.task_effects") == 400
    assert (
        await pool.fetchval(
            "SELECT count(*) FROM (SELECT task_id, attempt FROM public.task_effects"
            " GROUP BY task_id, attempt HAVING count(*) > 1) d"
        )
        == 0
    )


@pytest.mark.timeout(120)
async def test_three_scheduler_replicas_materialize_each_tick_exactly_once(repo: TaskRepo, spawn: Spawn) -> None:
    """RELIABILITY #7: 50 due ticks, 3 replicas (one killed mid-run) -> exactly 50 tasks."""
    first = datetime(datetime.now(UTC).year - 49, 1, 1, tzinfo=UTC)
    schedule_id = await repo.pool.fetchval(
        "INSERT INTO popagent_agent_schedules (source, workspace_id, name, prompt, model, session_id, cron,"
        " timezone, next_run_at, enabled, max_attempts)"
        " VALUES ('user', 'ws-7', 'yearly', 'effect', 'm/x', 's-7', '0 0 1 1 *', 'UTC', $1, true, 4) RETURNING id",
        first,
    )
    replicas = [spawn(POPAGENT_TASKS_TIMEZONE="UTC") for _ in range(3)]
    victim = random.choice(replicas)
    await asyncio.sleep(random.uniform(0.5, 2.0))
    victim.signal(signal.SIGKILL)
    for replica in replicas:
        if replica is not victim:
            await replica.wait_ready()

    await eventually(lambda: counts(repo.pool), until=lambda c: c.get("completed", 0) >= 50, within=60, interval=0.1)
    await asyncio.sleep(1.0)

    rows = await repo.pool.fetch("SELECT * FROM popagent_agent_tasks WHERE schedule_id = $1", schedule_id)
    assert len(rows) == 50
    assert sorted(r["tick"] for r in rows) == [first.replace(year=first.year + i) for i in range(50)]
    assert {(r["source"], r["workspace_id"], r["max_attempts"], r["session_id"]) for r in rows} == {
        ("user", "ws-7", 4, "s-7")
    }
    assert await repo.pool.fetchval("SELECT count(*) FROM popagent_agent_tasks") == 50
    schedule = await repo.pool.fetchrow("SELECT * FROM popagent_agent_schedules WHERE id = $1", schedule_id)
    assert schedule["last_tick"] == first.replace(year=first.year + 49)
    assert schedule["next_run_at"] == first.replace(year=first.year + 50)
    with contextlib.suppress(Exception):
        victim.stop()


@pytest.mark.timeout(90)
async def test_a_ticking_scheduler_replica_killed_mid_run_misses_and_doubles_no_tick(
    repo: TaskRepo, spawn: Spawn
) -> None:
    """RELIABILITY #7 with a kill while ticking: one replica ticks alone first (the leader by
    construction), two more join and tick too, then the first is SIGKILLed just as a tick falls
    due. A seconds-field cron (written to the table; the API takes minute crons) ticks every second."""
    first = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=4)
    schedule_id = await repo.pool.fetchval(
        "INSERT INTO popagent_agent_schedules (source, workspace_id, name, prompt, model, session_id, cron,"
        " timezone, next_run_at, enabled, max_attempts)"
        " VALUES ('user', 'ws-7', 'every second', 'ok', 'm/x', 's-7', '* * * * * *', 'UTC', $1, true, 1)"
        " RETURNING id",
        first,
    )

    async def materialized() -> int:
        return await repo.pool.fetchval("SELECT count(*) FROM popagent_agent_tasks WHERE schedule_id = $1", schedule_id)

    leader = spawn(POPAGENT_TASKS_TIMEZONE="UTC")
    await leader.wait_ready()
    await eventually(materialized, until=lambda n: n >= 2, within=20, interval=0.05)
    followers = [spawn(POPAGENT_TASKS_TIMEZONE="UTC") for _ in range(2)]
    for follower in followers:
        await follower.wait_ready()
    joined = await materialized()
    await eventually(materialized, until=lambda n: n >= joined + 2, within=20, interval=0.05)
    await asyncio.sleep(1 - datetime.now(UTC).microsecond / 1e6)  # the next tick falls due now
    leader.signal(signal.SIGKILL)
    killed_after = await materialized()

    # Four more ticks for the survivors to take (however long the start took on a loaded machine).
    last = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=4)
    await eventually(lambda: datetime.now(UTC) > last + timedelta(seconds=1.5), within=30, interval=0.1)
    await repo.pool.execute("UPDATE popagent_agent_schedules SET enabled = false WHERE id = $1", schedule_id)

    ticks = int((last - first).total_seconds()) + 1
    assert killed_after >= 4 and ticks >= killed_after + 4
    rows = await repo.pool.fetch(
        "SELECT tick FROM popagent_agent_tasks WHERE schedule_id = $1 AND tick <= $2 ORDER BY tick", schedule_id, last
    )
    assert [r["tick"] for r in rows] == [first + timedelta(seconds=i) for i in range(ticks)]
    assert [w.process.poll() for w in followers] == [None, None]


@pytest.fixture
async def restartable_database() -> AsyncIterator[tuple[StoppablePostgres, str]]:
    """A migrated tasks database on a PostgreSQL of its own, which the test may restart."""
    with stoppable_postgres() as postgres:
        dsn = await ensure_database(postgres.dsn, "popagent_tasks_restart")
        await migrate(dsn, "tasks", TASKS_MIGRATIONS["tasks"])
        yield postgres, dsn


@pytest.mark.timeout(120)
async def test_a_postgres_restart_mid_soak_reruns_interrupted_attempts_fenced_and_loses_nothing(
    restartable_database: tuple[StoppablePostgres, str],
    nats_url: str,
    internal_credentials: tuple[dict[str, str], str],
    tmp_path: Path,
) -> None:
    """RELIABILITY #8: the workers' sessions severed, then PostgreSQL restarted while attempts run.
    Those attempts' effects cannot be written (a database failure: released, run again as a new
    attempt); nothing is lost, no (task, attempt) runs twice, each rerun has its error recorded."""
    postgres, dsn = restartable_database
    _, callers = internal_credentials
    env = tasks_env(dsn, nats_url, callers, **{**FAST_ENV, "POPAGENT_TASKS_CONCURRENCY": "8"})
    workers = [WorkerProcess(env, tmp_path / f"worker-{i}.log") for i in range(2)]
    try:
        async with open_pool(dsn, "tasks", max_size=4) as pool:
            await pool.execute(EFFECTS_TABLE)
            for worker in workers:
                await worker.wait_ready()
            database = await pool.fetchval("SELECT current_database()")
            # The effect comes after a pause, so an attempt running at the stop writes it during the outage.
            await TaskRepo(pool).create_tasks(
                ["hang:0.3;effect"] * 120, source="user", workspace_id="ws-1", max_attempts=10
            )
            await eventually(lambda: counts(pool), until=lambda c: c.get("completed", 0) >= 20, within=30)
            severed = await pool.fetch(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = $1 AND application_name = 'popagent-tasks'",
                database,
            )
            running = (await counts(pool)).get("running", 0)
            postgres.stop()
            await asyncio.sleep(2)
            postgres.start()
            await pool.expire_connections()  # its sessions died with the server
            await wait_all(pool, 120, within=60)

            reruns = await pool.fetch(
                "SELECT t.id, t.attempt_count, array_agg(e.attempt ORDER BY e.attempt) AS effect_attempts,"
                " (SELECT count(*) FROM popagent_agent_task_progress p WHERE p.task_id = t.id"
                "  AND p.kind = 'recovered') AS errors"
                " FROM popagent_agent_tasks t JOIN public.task_effects e ON e.task_id = t.id"
                " GROUP BY t.id HAVING t.attempt_count > 1"
            )
            assert await pool.fetchval("SELECT count(DISTINCT task_id) FROM public.task_effects") == 120
            duplicated = await pool.fetchval(
                "SELECT count(*) FROM (SELECT 1 FROM public.task_effects GROUP BY task_id, attempt HAVING count(*) > 1) d"
            )
        assert [w.process.poll() for w in workers] == [None, None], "a worker died of the outage"
    finally:
        for worker in workers:
            worker.stop()

    assert severed and running > 0, "the faults came when no attempt was in flight"
    # Some of the attempts counted running may have written their effect before the stop; that a
    # fault hit work in flight shows in the attempts run again.
    assert reruns, "no attempt in flight was hit by the faults"
    assert duplicated == 0
    for rerun in reruns:
        # Every rerun is a new attempt (its effect carries the new number); each attempt before the
        # one that completed ended with a recorded error.
        assert rerun["effect_attempts"][-1] == rerun["attempt_count"], rerun
        assert len(set(rerun["effect_attempts"])) == len(rerun["effect_attempts"]), rerun
        assert rerun["errors"] == rerun["attempt_count"] - 1, rerun
