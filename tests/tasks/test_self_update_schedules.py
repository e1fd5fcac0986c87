"""The self-update scheduler on a real database: one system schedule per eligible workspace however
many reconcilers run at once and however often the policy flips; ordinary schedule writes never
change or delete a system row; materialization rereads the policy."""

from __future__ import annotations

import asyncio
import random

import asyncpg
import pytest

from popagent.agent_runner.v1 import agent_runner_pb2 as arpb
from popagent.evolution.v1 import evolution_pb2 as epb
from popagent_core.errors import PermissionDenied
from popagent_tasks.model import ScheduleFields, Source
from popagent_tasks.repo import ScheduleNotFound, TaskRepo
from popagent_tasks.schedules import Scheduler
from popagent_tasks.self_update import SelfUpdatePlan, SelfUpdateScheduler, plan_of


async def _noop(task_id: str) -> None:
    return None


def eligibility(*workspaces: str, agents_problem: str = "") -> arpb.SelfUpdateEligibility:
    return arpb.SelfUpdateEligibility(
        agents_problem=agents_problem,
        workspaces=[arpb.SelfUpdateWorkspace(workspace_id=w) for w in workspaces],
    )


def test_the_plan_needs_every_precondition() -> None:
    on = epb.AutonomySettings(evolution_enabled=True, self_update_enabled=True, self_update_cron="0 3 * * *")
    assert plan_of(on, eligibility("a", "b")).workspaces == ("a", "b")
    assert (
        plan_of(epb.AutonomySettings(evolution_enabled=True, self_update_cron="0 3 * * *"), eligibility("a")).workspaces
        == ()
    )
    assert (
        plan_of(
            epb.AutonomySettings(self_update_enabled=True, self_update_cron="0 3 * * *"), eligibility("a")
        ).workspaces
        == ()
    )
    refused = plan_of(on, eligibility("a", agents_problem="reviewer must be delegation-eligible"))
    assert refused.workspaces == () and "reviewer must be delegation-eligible" in refused.reasons
    broken = arpb.SelfUpdateEligibility(
        workspaces=[
            arpb.SelfUpdateWorkspace(workspace_id="a", problem="not a Git repository"),
            arpb.SelfUpdateWorkspace(workspace_id="b"),
        ]
    )
    assert plan_of(on, broken).workspaces == ("b",)


async def system_rows(pool: asyncpg.Pool) -> list[asyncpg.Record]:
    return await pool.fetch(
        "SELECT workspace_id, cron FROM popagent_agent_schedules WHERE source = 'self-update' ORDER BY workspace_id"
    )


async def test_three_concurrent_reconcilers_keep_one_system_schedule_per_workspace(pool: asyncpg.Pool) -> None:
    repo = TaskRepo(pool, wake=_noop)
    plans = [
        SelfUpdatePlan("0 3 * * *", ("alpha", "beta")),
        SelfUpdatePlan("", ()),
        SelfUpdatePlan("*/5 * * * *", ("alpha", "beta", "gamma")),
        SelfUpdatePlan("0 4 * * *", ("beta",)),
    ]
    current = {"plan": plans[0]}

    async def plan() -> SelfUpdatePlan:
        await asyncio.sleep(random.random() / 100)
        return current["plan"]

    reconcilers = [SelfUpdateScheduler(repo, plan, "UTC") for _ in range(3)]
    for flip in range(12):
        current["plan"] = plans[flip % len(plans)]
        await asyncio.gather(*(reconciler.reconcile() for reconciler in reconcilers for _ in range(2)))
        rows = await system_rows(pool)
        expected = current["plan"]
        assert [row["workspace_id"] for row in rows] == list(expected.workspaces), flip
        assert all(row["cron"] == expected.cron for row in rows)
    # A user schedule in the same workspace is not the system's slot and is never touched.
    await repo.insert_schedule("beta", user_fields())
    current["plan"] = SelfUpdatePlan("", ())
    await reconcilers[0].reconcile()
    remaining = await pool.fetch("SELECT source FROM popagent_agent_schedules")
    assert [row["source"] for row in remaining] == ["user"]


def user_fields() -> ScheduleFields:
    return ScheduleFields(
        name="mine",
        prompt="p",
        model="",
        session_id="",
        cron="0 1 * * *",
        timezone="UTC",
        next_run_at=None,
        enabled=True,
        max_attempts=3,
    )


async def test_ordinary_schedule_writes_cannot_change_or_delete_a_system_row(pool: asyncpg.Pool) -> None:
    repo = TaskRepo(pool, wake=_noop)

    async def plan() -> SelfUpdatePlan:
        return SelfUpdatePlan("0 3 * * *", ("alpha",))

    [system] = await SelfUpdateScheduler(repo, plan, "UTC").reconcile()
    assert system.source is Source.SELF_UPDATE
    with pytest.raises(PermissionDenied, match="self-update scheduler's"):
        await repo.update_schedule(str(system.id), lambda current: user_fields())
    with pytest.raises(PermissionDenied, match="self-update scheduler's"):
        await repo.delete_schedule(str(system.id))
    with pytest.raises(ScheduleNotFound):
        await repo.delete_schedule("00000000-0000-0000-0000-000000000000")
    # Nor can a user row take the slot: an insert is always source='user'.
    created = await repo.insert_schedule("alpha", user_fields())
    assert created.source is Source.USER
    assert len(await system_rows(pool)) == 1


async def test_materialization_rereads_the_policy(pool: asyncpg.Pool) -> None:
    repo = TaskRepo(pool, wake=_noop)

    async def plan() -> SelfUpdatePlan:
        return SelfUpdatePlan("* * * * *", ("alpha",))

    await SelfUpdateScheduler(repo, plan, "UTC").reconcile()
    await pool.execute("UPDATE popagent_agent_schedules SET next_run_at = now() - interval '1 minute'")
    allowed = {"now": False}

    async def allows() -> bool:
        return allowed["now"]

    scheduler = Scheduler(repo, self_update_allowed=allows)
    assert await scheduler.run_once() == 0
    assert await pool.fetchval("SELECT count(*) FROM popagent_agent_tasks") == 0
    allowed["now"] = True
    await pool.execute("UPDATE popagent_agent_schedules SET next_run_at = now() - interval '1 minute'")
    # The minute-old tick, and the current minute's when the clock just passed it.
    assert await scheduler.run_once() >= 1
    tasks = await pool.fetch("SELECT source, workspace_id, max_attempts FROM popagent_agent_tasks")
    assert tasks and {tuple(task) for task in tasks} == {("self-update", "alpha", 3)}


async def test_a_stop_during_the_first_reconcile_keeps_the_loop_from_starting(pool: asyncpg.Pool) -> None:
    repo = TaskRepo(pool, wake=_noop)
    entered = asyncio.Event()
    release = asyncio.Event()

    async def plan() -> SelfUpdatePlan:
        entered.set()
        await release.wait()
        return SelfUpdatePlan("", ())

    scheduler = SelfUpdateScheduler(repo, plan, "UTC", interval_s=0.01)
    starting = asyncio.create_task(scheduler.start())
    await entered.wait()
    stopping = asyncio.create_task(scheduler.stop())
    await asyncio.sleep(0)
    release.set()
    await asyncio.wait_for(asyncio.gather(starting, stopping), 10)
    assert scheduler._loop is None  # pyright: ignore[reportPrivateUsage]
