"""Cancellation, fencing, recovery by heartbeat staleness, and serialized start/stop."""

from __future__ import annotations

import asyncio
import time

import pytest

from popagent_tasks.executor import AbortReason
from popagent_tasks.observer import TaskStopped
from popagent_tasks.repo import TaskNotCancellable
from support.waiting import eventually
from tasks.executors import ScriptedExecutor
from tasks.harness import Harness


async def claim_one(harness: Harness, worker_id: str = "elsewhere") -> tuple:
    [task] = await harness.repo.claim(worker_id, 1)
    return task.attempt_key


async def test_cancelling_a_cooperative_executor_stops_it_and_nothing_runs_again(harness: Harness) -> None:
    executor = ScriptedExecutor()
    worker = harness.worker(executor)
    await worker.start()
    task_id = await harness.create("sleep:30", source="self-update")
    await harness.wait_status(task_id, "running")
    await eventually(lambda: executor.calls != [])

    started = time.monotonic()
    requested = await harness.repo.cancel_task(str(task_id))
    row = await harness.wait_status(task_id, "cancelled")

    assert requested.status == "cancelling"
    assert time.monotonic() - started < 10
    assert row["attempt_count"] == 1
    assert executor.settled == [(str(task_id), 1)]
    assert harness.recorder.shape(task_id) == ["start:1", "stop:1:cancelled"]
    await asyncio.sleep(0.5)
    assert executor.calls == [(str(task_id), 1)]
    assert (await harness.row(task_id))["status"] == "cancelled"


async def test_cancelling_a_queued_task_is_immediate_and_it_never_runs(harness: Harness) -> None:
    task_id = await harness.create("effect")

    cancelled = await harness.repo.cancel_task(str(task_id))
    executor = ScriptedExecutor()
    await harness.worker(executor).start()
    await asyncio.sleep(0.3)

    assert cancelled.status == "cancelled"
    assert executor.calls == []
    assert await harness.status(task_id) == "cancelled"


async def test_an_executor_that_ignores_cancel_keeps_its_slot_until_it_settles(harness: Harness) -> None:
    executor = ScriptedExecutor()
    # The cancel reaches the worker with its next heartbeat (0.1 s), well inside the bound (2 s).
    worker = harness.worker(executor, concurrency=1, abort_ack_s=1.0, sweep_interval_s=1.0)
    await worker.start()
    stubborn = await harness.create("release:stubborn", source="self-update")
    await harness.wait_status(stubborn, "running")
    behind = await harness.create("ok")

    await harness.repo.cancel_task(str(stubborn))
    await eventually(lambda: "stop:1:interrupted" in harness.recorder.shape(stubborn))

    assert await harness.status(stubborn) == "cancelling"
    assert await harness.status(behind) == "queued"
    interrupted = harness.recorder.for_task(stubborn)[-1]
    assert isinstance(interrupted, TaskStopped) and interrupted.abort_reason == "cancelled"
    assert [p["kind"] for p in await harness.progress(stubborn)] == ["cancel_requested", "interrupted"]
    # Restarting this runtime does not recover the held attempt into an overlapping retry.
    await worker.stop()
    await harness.backdate_heartbeat(stubborn, 3600)
    await worker.start()
    assert await harness.status(stubborn) == "cancelling"
    assert len(worker.slots) == 1

    executor.gate("stubborn").set()
    row = await harness.wait_status(stubborn, "cancelled")
    await harness.wait_status(behind, "completed")

    assert row["attempt_count"] == 1
    assert [c for c in executor.calls if c[0] == str(stubborn)] == [(str(stubborn), 1)]
    assert harness.recorder.shape(stubborn) == ["start:1", "stop:1:interrupted", "stop:1:cancelled"]


async def test_cancel_is_idempotent_and_refused_once_terminal(harness: Harness) -> None:
    task_id = await harness.create("ok")
    await claim_one(harness)
    first = await harness.repo.cancel_task(str(task_id))
    second = await harness.repo.cancel_task(str(task_id))
    assert (first.status, second.status) == ("cancelling", "cancelling")
    await harness.pool.execute("UPDATE popagent_agent_tasks SET status = 'completed' WHERE id = $1", task_id)
    with pytest.raises(TaskNotCancellable):
        await harness.repo.cancel_task(str(task_id))


async def test_a_stale_claims_completion_and_failure_change_nothing_100_of_100(harness: Harness) -> None:
    """RELIABILITY #3 at the statement level: reclaim by back-dated heartbeat, then the old attempt reports."""
    for round_number in range(100):
        task_id = await harness.create(f"round {round_number}", source="self-update")
        old_id, old_attempt = await claim_one(harness, "old")
        assert old_id == task_id
        await harness.backdate_heartbeat(task_id, 60)
        recovered = await harness.repo.recover_orphans(heartbeat_timeout_s=30, stale_after_s=3600, exclude=[], limit=10)
        assert [t.task.status for t in recovered] == ["queued"]
        new_id, new_attempt = await claim_one(harness, "new")
        assert (new_id, new_attempt) == (task_id, old_attempt + 1)

        assert await harness.repo.complete([(task_id, old_attempt, "stale outcome")]) == []
        failed = await harness.repo.fail(
            task_id,
            old_attempt,
            error_class="provider",
            message="stale failure",
            retry_eligible=True,
            delay_s=0,
            explain="",
        )
        assert failed is None
        assert await harness.repo.settle_cancelled(task_id, old_attempt) is None
        assert await harness.repo.heartbeat([(task_id, old_attempt)]) == {}
        assert not await harness.repo.attempt_progress(task_id, old_attempt, "progress", "stale")
        row = await harness.row(task_id)
        assert (row["status"], row["attempt_count"], row["claimed_by"], row["outcome"]) == ("running", 2, "new", None)
        await harness.repo.complete([(task_id, new_attempt, "done")])


async def test_a_worker_that_lost_its_claim_is_aborted_and_its_result_discarded(harness: Harness) -> None:
    old_executor = ScriptedExecutor()
    old = harness.worker(old_executor, heartbeat_interval_s=0.2, concurrency=1)
    await old.start()
    task_id = await harness.create("release:old", source="self-update")
    await harness.wait_status(task_id, "running")
    await eventually(lambda: old_executor.calls != [])

    # The old worker's slot looks dead to everyone else: another worker recovers and runs it.
    await harness.pool.execute(
        "UPDATE popagent_agent_tasks SET heartbeat_at = clock_timestamp() - interval '1 hour',"
        " status = 'queued', next_attempt_at = clock_timestamp() WHERE id = $1",
        task_id,
    )
    [reclaimed] = await harness.repo.claim("new", 1)
    aborted_at = time.monotonic()
    await eventually(lambda: old.slots.get(task_id) is not None and old.slots[task_id].abort.aborted, within=3)

    assert time.monotonic() - aborted_at <= 3
    assert old.slots[task_id].abort.reason is AbortReason.LOST_CLAIM
    old_executor.gate("old").set()
    await eventually(lambda: task_id not in old.slots)
    current = await harness.row(task_id)
    assert (current["status"], current["attempt_count"], current["claimed_by"]) == ("running", 2, "new")
    assert "stop:1:completed" not in harness.recorder.shape(task_id)
    assert reclaimed.attempt_count == 2


async def test_recovery_requeues_dead_letters_fails_stale_and_finalizes_cancelling(harness: Harness) -> None:
    """RELIABILITY #4 by time travel: past the horizon -> recovered by the rules; inside -> untouched."""
    repo = harness.repo
    below = await harness.create("requeue me", source="user", max_attempts=3)
    exhausted = await harness.create("exhausted", source="self-update", max_attempts=1)
    stale = await harness.create("stale", source="user", max_attempts=3)
    cancelling = await harness.create("cancelling", max_attempts=3)
    fresh = await harness.create("fresh", max_attempts=3)
    for _ in range(5):
        await claim_one(harness, "dead-worker")
    await repo.cancel_task(str(cancelling))
    before = {task_id: await harness.row(task_id) for task_id in (below, exhausted, stale, cancelling, fresh)}
    for task_id in (below, exhausted, cancelling):
        await harness.backdate_heartbeat(task_id, 31)
    await harness.backdate_heartbeat(stale, 7200)
    await harness.backdate_heartbeat(fresh, 29)
    fresh_heartbeat = (await harness.row(fresh))["heartbeat_at"]

    worker = harness.worker(heartbeat_timeout_s=30, stale_after_s=3600, concurrency=1)
    transitions = await worker.recover()

    assert {t.task.id: t.task.status for t in transitions} == {
        below: "queued",
        exhausted: "dead-letter",
        stale: "failed",
        cancelling: "cancelled",
    }
    after = {task_id: await harness.row(task_id) for task_id in before}
    for task_id, row in after.items():
        for column in ("prompt", "model", "session_id", "schedule_id", "workspace_id", "source", "max_attempts"):
            assert row[column] == before[task_id][column], (column, task_id)
    assert after[fresh]["status"] == "running" and after[fresh]["heartbeat_at"] == fresh_heartbeat
    assert (after[below]["attempt_count"], after[below]["last_error_class"]) == (1, "worker_lost")
    assert after[exhausted]["dead_lettered_at"] is not None
    assert after[stale]["last_error_class"] == "stale"
    assert len(await harness.remediations_of(exhausted)) == 1
    assert len(await harness.remediations_of(stale)) == 1
    assert await harness.remediations_of(below) == []
    assert await harness.remediations_of(cancelling) == []
    assert [p["kind"] for p in await harness.progress(below)] == ["recovered"]
    assert harness.recorder.shape(below) == ["stop:1:failed:retry"]
    assert harness.recorder.shape(exhausted) == ["stop:1:dead-letter"]
    assert harness.recorder.shape(cancelling) == ["stop:1:cancelled"]
    # A second pass finds nothing more to do.
    assert await worker.recover() == []


async def test_a_stop_during_start_lets_recovery_finish_and_keeps_polling_off(harness: Harness) -> None:
    orphan = await harness.create("orphan")
    await claim_one(harness, "dead-worker")
    await harness.backdate_heartbeat(orphan, 60)
    waiting = await harness.create("ok")
    executor = ScriptedExecutor()
    worker = harness.worker(executor)

    starting = asyncio.create_task(worker.start())
    await asyncio.sleep(0)
    await worker.stop()
    await starting

    assert worker.recovery_passes == 1
    assert await harness.status(orphan) == "queued"
    assert not worker.running
    await asyncio.sleep(0.5)
    assert executor.calls == []
    assert await harness.status(waiting) == "queued"
    # A later explicit start initializes again and runs the work.
    await worker.start()
    await harness.wait_status(waiting, "completed")
    await harness.wait_status(orphan, "failed")
    assert worker.recovery_passes >= 2


async def test_stop_lets_short_work_finish_and_requeues_what_it_aborts(harness: Harness) -> None:
    """RELIABILITY #10 in-process: nothing a stop interrupts is lost."""
    executor = ScriptedExecutor()
    worker = harness.worker(executor, concurrency=10, shutdown_grace_s=0.5, abort_ack_s=0.5)
    await worker.start()
    quick = [await harness.create("hang:0.2;ok") for _ in range(3)]
    slow = [await harness.create("sleep:30", source="self-update") for _ in range(3)]
    await eventually(lambda: len(worker.slots) == 6)

    started = time.monotonic()
    await worker.stop()

    assert time.monotonic() - started < 0.5 + 0.5 + 1.0
    for task_id in quick:
        assert (await harness.row(task_id))["status"] == "completed"
    for task_id in slow:
        row = await harness.row(task_id)
        assert (row["status"], row["attempt_count"], row["last_error_class"]) == ("queued", 1, "shutdown")
    assert worker.slots == {}


async def test_a_stop_requeues_a_last_attempt_without_using_it_up(harness: Harness) -> None:
    """Shutdown is not the task's failure: even its only attempt goes back to the queue."""
    worker = harness.worker(ScriptedExecutor(), shutdown_grace_s=0.1, abort_ack_s=0.5)
    await worker.start()
    task_id = await harness.create("sleep:1.5", source="user", max_attempts=1)
    await eventually(lambda: task_id in worker.slots)

    await worker.stop()

    row = await harness.row(task_id)
    assert (row["status"], row["attempt_count"], row["uncounted_attempts"]) == ("queued", 1, 1)
    assert await harness.remediations_of(task_id) == []
    again = harness.worker(ScriptedExecutor())
    await again.start()
    row = await harness.wait_status(task_id, "completed")
    assert row["attempt_count"] == 2
