"""RELIABILITY #15: a hypothesis state machine over the task lifecycle against real PostgreSQL.

Rules: create, claim, heartbeat, complete, fail, cancel, crash (time travel), sweep,
resolve, delete and cron_tick, each through the same repository calls the worker and
the API make, with stale attempt tokens drawn as often as current ones. After every step
the database must equal the model: single live claim per task, attempts never above
max, the fence holds (a stale token changes nothing), no task lost or invented, one
remediation per terminally failed task and none for remediation work, one task per
(schedule, tick).

CI runs 50 examples x 30 steps; POPAGENT_TEST_TASKS_HYPOTHESIS_FULL=1 runs 500 x 50.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime

import asyncpg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from popagent_core.db import open_pool
from popagent_core.errors import PopagentError
from popagent_tasks.model import Schedule, Task
from popagent_tasks.repo import TaskRepo
from popagent_tasks.schedules import due_ticks

FULL = os.environ.get("POPAGENT_TEST_TASKS_HYPOTHESIS_FULL") == "1"
EXAMPLES, STEPS = (500, 50) if FULL else (50, 30)
LIVE = ("running", "cancelling")
TERMINAL = ("completed", "failed", "cancelled", "dead-letter")


@dataclass
class ModelTask:
    source: str
    kind: str
    max_attempts: int
    status: str = "queued"
    attempts: int = 0
    crashed: bool = False
    parent: uuid.UUID | None = None
    remediation: uuid.UUID | None = None
    tick: datetime | None = None


@dataclass
class World:
    loop: asyncio.AbstractEventLoop
    pool: asyncpg.Pool
    repo: TaskRepo
    schedule_id: uuid.UUID | None = None
    first_tick: datetime | None = None
    ticks: set[datetime] = field(default_factory=set)


WORLD: World | None = None


class TaskLifecycle(RuleBasedStateMachine):
    examples = 0
    checks = 0

    def __init__(self) -> None:
        super().__init__()
        TaskLifecycle.examples += 1
        assert WORLD is not None
        self.world = WORLD
        self.tasks: dict[uuid.UUID, ModelTask] = {}
        self.tokens: list[tuple[uuid.UUID, int]] = []
        self.run(self.world.pool.execute("TRUNCATE popagent_agent_tasks, popagent_agent_schedules CASCADE"))
        self.world.ticks.clear()

    def run(self, coroutine):  # type: ignore[no-untyped-def]
        return self.world.loop.run_until_complete(coroutine)

    # -- helpers ------------------------------------------------------------------

    def with_status(self, *statuses: str) -> list[uuid.UUID]:
        return [task_id for task_id, task in self.tasks.items() if task.status in statuses]

    def apply(self, changed: Task, remediation: uuid.UUID | None = None) -> None:
        task = self.tasks[changed.id]
        task.status, task.attempts, task.crashed = changed.status.value, changed.attempt_count, False
        if remediation is not None:
            assert task.kind == "task" and task.remediation is None
            task.remediation = remediation
            self.tasks[remediation] = ModelTask(task.source, "remediation", task.max_attempts, parent=changed.id)

    def current(self, token: tuple[uuid.UUID, int]) -> bool:
        task = self.tasks.get(token[0])
        return task is not None and task.status in LIVE and task.attempts == token[1]

    # -- rules --------------------------------------------------------------------

    @initialize()
    def schedule(self) -> None:
        first = datetime(datetime.now(UTC).year - 5, 1, 1, tzinfo=UTC)
        self.world.first_tick = first
        self.world.schedule_id = self.run(
            self.world.pool.fetchval(
                "INSERT INTO popagent_agent_schedules (source, workspace_id, name, prompt, model, session_id, cron,"
                " timezone, next_run_at, enabled, max_attempts)"
                " VALUES ('self-update', 'ws', 'yearly', 'p', '', '', '0 0 1 1 *', 'UTC', $1, true, 2) RETURNING id",
                first,
            )
        )

    @rule(source=st.sampled_from(["user", "self-update"]), max_attempts=st.integers(1, 4))
    def create(self, source: str, max_attempts: int) -> None:
        created = self.run(
            self.world.repo.create_task(
                source=source, workspace_id="ws", prompt="p", model="m", session_id="", max_attempts=max_attempts
            )
        )
        self.tasks[created.id] = ModelTask(source, "task", max_attempts)

    @rule(worker=st.sampled_from(["A", "B"]))
    def claim(self, worker: str) -> None:
        claimable = [t for t in self.with_status("queued") if self.tasks[t].attempts < self.tasks[t].max_attempts]
        claimed = self.run(self.world.repo.claim(worker, 1))
        assert bool(claimed) == bool(claimable)
        for row in claimed:
            assert row.id in claimable
            assert row.attempt_count == self.tasks[row.id].attempts + 1
            self.apply(row)
            self.tokens.append(row.attempt_key)

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def heartbeat(self, data: st.DataObject) -> None:
        token = data.draw(st.sampled_from(self.tokens))
        live = self.run(self.world.repo.heartbeat([token]))
        if self.current(token):
            assert live == {token[0]: self.tasks[token[0]].status}
            # A heartbeat proves its worker alive again: no longer an orphan.
            self.tasks[token[0]].crashed = False
        else:
            assert live == {}

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def complete(self, data: st.DataObject) -> None:
        token = data.draw(st.sampled_from(self.tokens))
        was_current, before = self.current(token), self.tasks.get(token[0])
        completed = self.run(self.world.repo.complete([(token[0], token[1], "done")]))
        if not was_current:
            assert completed == []
            return
        assert before is not None
        [row] = completed
        assert row.status == ("cancelled" if before.status == "cancelling" else "completed")
        self.apply(row)

    @precondition(lambda self: self.tokens)
    @rule(data=st.data(), transient=st.booleans())
    def fail(self, data: st.DataObject, transient: bool) -> None:
        token = data.draw(st.sampled_from(self.tokens))
        was_current, task = self.current(token), self.tasks.get(token[0])
        eligible = task is not None and task.source == "self-update" and transient
        transition = self.run(
            self.world.repo.fail(
                token[0],
                token[1],
                error_class="provider" if transient else "validation",
                message="boom",
                retry_eligible=eligible,
                delay_s=0,
                explain="",
            )
        )
        if not was_current:
            assert transition is None
            return
        assert task is not None and transition is not None
        if task.status == "cancelling":
            expected = "cancelled"
        elif eligible:
            expected = "queued" if task.attempts < task.max_attempts else "dead-letter"
        else:
            expected = "failed"
        assert transition.task.status == expected
        if expected in ("failed", "dead-letter") and task.kind == "task":
            assert transition.remediation_id is not None
        else:
            assert transition.remediation_id is None
        self.apply(transition.task, transition.remediation_id)

    @precondition(lambda self: self.tasks)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        task_id = data.draw(st.sampled_from(list(self.tasks)))
        task = self.tasks[task_id]
        try:
            row = self.run(self.world.repo.cancel_task(str(task_id)))
        except PopagentError:
            assert task.status in TERMINAL
            return
        expected = {"queued": "cancelled", "running": "cancelling", "cancelling": "cancelling"}[task.status]
        assert row.status == expected
        task.status = expected

    @precondition(lambda self: self.with_status(*LIVE))
    @rule(data=st.data())
    def crash(self, data: st.DataObject) -> None:
        """The worker holding this attempt dies: its heartbeat goes stale (time travel)."""
        task_id = data.draw(st.sampled_from(self.with_status(*LIVE)))
        self.run(
            self.world.pool.execute(
                "UPDATE popagent_agent_tasks SET heartbeat_at = clock_timestamp() - interval '60 seconds'"
                " WHERE id = $1",
                task_id,
            )
        )
        self.tasks[task_id].crashed = True

    @rule()
    def sweep(self) -> None:
        crashed = {t for t, task in self.tasks.items() if task.crashed and task.status in LIVE}
        transitions = self.run(
            self.world.repo.recover_orphans(heartbeat_timeout_s=30, stale_after_s=3600, exclude=[], limit=100)
        )
        assert {t.task.id for t in transitions} == crashed
        for transition in transitions:
            task = self.tasks[transition.task.id]
            if task.status == "cancelling":
                expected = "cancelled"
            else:
                expected = "queued" if task.attempts < task.max_attempts else "dead-letter"
            assert transition.task.status == expected
            self.apply(transition.task, transition.remediation_id)

    @precondition(lambda self: self.tasks)
    @rule(data=st.data())
    def resolve(self, data: st.DataObject) -> None:
        task_id = data.draw(st.sampled_from(list(self.tasks)))
        task = self.tasks[task_id]
        try:
            row = self.run(self.world.repo.resolve_task(str(task_id), "evidence"))
        except PopagentError:
            assert task.status not in ("failed", "cancelled", "dead-letter")
            return
        assert row.status == "completed" and row.last_error_class is None
        task.status = "completed"

    @precondition(lambda self: self.tasks)
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        task_id = data.draw(st.sampled_from(list(self.tasks)))
        try:
            self.run(self.world.repo.delete_task(str(task_id)))
        except PopagentError:
            assert self.tasks[task_id].status not in TERMINAL
            return
        removed = self.tasks.pop(task_id)
        assert removed.status in TERMINAL
        if removed.parent in self.tasks:
            self.tasks[removed.parent].remediation = None  # type: ignore[index]
        # Deleting a record frees its tick: uniqueness holds among the rows that exist.
        self.world.ticks.discard(removed.tick)  # type: ignore[arg-type]

    @rule(rewind_years=st.integers(0, 6), replicas=st.integers(1, 3))
    def cron_tick(self, rewind_years: int, replicas: int) -> None:
        """Replicas race to materialize due ticks, some of which exist already. (Rewinding
        the schedule is time travel: in service, next_run_at only moves forward.)"""
        world = self.world
        assert world.first_tick is not None
        if rewind_years:
            start = world.first_tick.replace(year=world.first_tick.year + 6 - rewind_years)
            self.run(
                world.pool.execute(
                    "UPDATE popagent_agent_schedules SET next_run_at = $2 WHERE id = $1", world.schedule_id, start
                )
            )

        def ticks_for(schedule: Schedule) -> tuple[list[datetime], datetime | None]:
            assert schedule.timezone is not None and schedule.next_run_at is not None
            return due_ticks(schedule.cron, schedule.timezone, schedule.next_run_at, datetime.now(UTC))

        async def race() -> list[int]:
            return await asyncio.gather(*(world.repo.materialize_due(ticks_for, 10) for _ in range(replicas)))

        self.run(race())
        rows = self.run(
            world.pool.fetch(
                "SELECT id, tick, status, attempt_count FROM popagent_agent_tasks WHERE schedule_id = $1",
                world.schedule_id,
            )
        )
        for row in rows:
            if row["tick"] not in world.ticks:
                world.ticks.add(row["tick"])
                self.tasks[row["id"]] = ModelTask("self-update", "task", 2, tick=row["tick"])

    # -- invariants ---------------------------------------------------------------

    @invariant()
    def database_equals_model(self) -> None:
        TaskLifecycle.checks += 1
        rows = self.run(self.world.pool.fetch("SELECT * FROM popagent_agent_tasks"))
        by_id = {row["id"]: row for row in rows}
        assert set(by_id) == set(self.tasks), "a task was lost or invented"
        for task_id, task in self.tasks.items():
            row = by_id[task_id]
            assert (row["status"], row["attempt_count"], row["kind"]) == (task.status, task.attempts, task.kind)
            assert row["attempt_count"] <= row["max_attempts"]
            assert row["source"] == task.source and row["max_attempts"] == task.max_attempts
            if row["status"] == "dead-letter":
                assert row["dead_lettered_at"] is not None
            remediations = [r for r in rows if r["kind"] == "remediation" and r["parent_task_id"] == task_id]
            if task.kind == "remediation":
                assert remediations == []
            else:
                assert len(remediations) <= 1
                assert [r["id"] for r in remediations] == ([task.remediation] if task.remediation else [])
        ticks = [row["tick"] for row in rows if row["schedule_id"] is not None]
        assert len(ticks) == len(set(ticks)), "a cron tick fired twice"


@pytest.mark.timeout(900 if FULL else 240)
def test_task_lifecycle_state_machine(make_database, pg_dsn: str) -> None:  # type: ignore[no-untyped-def]
    global WORLD
    from tasks.harness import TASKS_MIGRATIONS

    loop = asyncio.new_event_loop()
    try:
        dsn = loop.run_until_complete(make_database(TASKS_MIGRATIONS))
        pool_cm = open_pool(dsn, "tasks", max_size=4)
        pool = loop.run_until_complete(pool_cm.__aenter__())
        WORLD = World(loop, pool, TaskRepo(pool))
        try:
            machine = settings(
                max_examples=EXAMPLES,
                stateful_step_count=STEPS,
                deadline=None,
                database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
            )(TaskLifecycle)
            machine.TestCase().runTest()
            print(f"state machine: {TaskLifecycle.examples} examples, {TaskLifecycle.checks} checked steps")
            assert TaskLifecycle.examples >= EXAMPLES
        finally:
            WORLD = None
            loop.run_until_complete(pool_cm.__aexit__(None, None, None))
    finally:
        loop.close()
