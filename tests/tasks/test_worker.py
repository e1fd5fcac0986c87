"""The worker against real PostgreSQL: execution, the retry policy class by class, dead
letter and remediation, timeouts, and best-effort observers."""

from __future__ import annotations

import pytest

from popagent_tasks.model import RELEASED, TRANSIENT, Backoff, ErrorClass
from popagent_tasks.observer import TaskStarted, TaskStopped
from support.waiting import eventually
from tasks.executors import ScriptedExecutor
from tasks.harness import Harness, Recorder

NEVER_RETRY = sorted(set(ErrorClass) - TRANSIENT - RELEASED)


async def test_a_task_runs_once_and_start_and_stop_share_turn_and_trace_ids(harness: Harness) -> None:
    worker = harness.worker()
    await worker.start()
    task_id = await harness.create("progress:halfway;ok")

    row = await harness.wait_status(task_id, "completed")

    assert row["attempt_count"] == 1
    assert row["outcome"] == "ok"
    assert harness.recorder.shape(task_id) == ["start:1", "stop:1:completed"]
    start, stop = harness.recorder.for_task(task_id)
    assert isinstance(start, TaskStarted) and isinstance(stop, TaskStopped)
    assert start.task.turn_id == stop.task.turn_id == str(row["turn_id"])
    assert start.task.trace_id == stop.task.trace_id == row["trace_id"] and len(row["trace_id"]) == 32
    assert stop.outcome == "ok"
    assert start.prompt == "progress:halfway;ok"
    assert [(p["kind"], p["message"]) for p in await harness.progress(task_id)] == [("progress", "halfway")]


@pytest.mark.parametrize("error_class", sorted(TRANSIENT - RELEASED))
async def test_self_update_work_retries_transient_failures_then_dead_letters_with_one_remediation(
    harness: Harness, error_class: ErrorClass
) -> None:
    executor = ScriptedExecutor()
    worker = harness.worker(executor)
    await worker.start()
    task_id = await harness.create(f"fail:{error_class}", source="self-update", max_attempts=3, workspace="ws-9")

    row = await harness.wait_status(task_id, "dead-letter")

    assert row["attempt_count"] == 3
    assert row["last_error_class"] == error_class
    assert row["dead_lettered_at"] is not None
    assert [call for call in executor.calls if call[0] == str(task_id)] == [(str(task_id), n) for n in (1, 2, 3)]
    assert harness.recorder.shape(task_id) == [
        "start:1",
        "stop:1:failed:retry",
        "start:2",
        "stop:2:failed:retry",
        "start:3",
        "stop:3:dead-letter",
    ]
    kinds = [p["kind"] for p in await harness.progress(task_id)]
    assert kinds == ["retry_scheduled", "retry_scheduled", "dead_letter", "remediation"]
    dead = (await harness.progress(task_id))[2]["message"]
    assert "retries exhausted" in dead and error_class in dead

    remediations = await harness.remediations_of(task_id)
    assert len(remediations) == 1
    remediation = remediations[0]
    assert remediation["workspace_id"] == "ws-9"
    assert remediation["source"] == "self-update"
    assert str(task_id) in remediation["prompt"]
    stop = harness.recorder.for_task(task_id)[-1]
    assert isinstance(stop, TaskStopped) and stop.extra == {"remediationTaskId": str(remediation["id"])}
    assert stop.error_class == error_class


@pytest.mark.parametrize("error_class", NEVER_RETRY)
async def test_self_update_work_never_retries_permanent_failures(harness: Harness, error_class: ErrorClass) -> None:
    worker = harness.worker()
    await worker.start()
    task_id = await harness.create(f"fail:{error_class}", source="self-update", max_attempts=3)

    row = await harness.wait_status(task_id, "failed")

    assert row["attempt_count"] == 1
    assert row["last_error_class"] == error_class
    assert row["dead_lettered_at"] is None
    assert harness.recorder.shape(task_id) == ["start:1", "stop:1:failed"]
    assert len(await harness.remediations_of(task_id)) == 1


async def test_an_unexpected_exception_is_an_unknown_failure_that_never_retries(harness: Harness) -> None:
    worker = harness.worker()
    await worker.start()
    task_id = await harness.create("raise", source="self-update")

    row = await harness.wait_status(task_id, "failed")

    assert (row["attempt_count"], row["last_error_class"]) == (1, "unknown")


@pytest.mark.parametrize("error_class", sorted(TRANSIENT - RELEASED))
async def test_user_tasks_fail_after_any_execution_error(harness: Harness, error_class: ErrorClass) -> None:
    worker = harness.worker()
    await worker.start()
    task_id = await harness.create(f"fail:{error_class}", source="user", max_attempts=3)

    row = await harness.wait_status(task_id, "failed")

    assert row["attempt_count"] == 1
    assert "user tasks are not replayed" in (await harness.progress(task_id))[0]["message"]


@pytest.mark.parametrize("error_class", sorted(RELEASED))
async def test_an_orderly_interruption_requeues_a_user_task_without_remediation(
    harness: Harness, error_class: ErrorClass
) -> None:
    """Issue 22 finding 2: shutdown, the service cancelling the turn, a database unreachable
    at commit are not execution errors: the attempt is released (fenced) and the task completes."""
    worker = harness.worker()
    await worker.start()
    task_id = await harness.create(f"fail-below:2:{error_class};ok", source="user", max_attempts=3)

    row = await harness.wait_status(task_id, "completed")

    assert row["attempt_count"] == 2
    assert row["uncounted_attempts"] == (1 if error_class is ErrorClass.SHUTDOWN else 0)
    assert await harness.remediations_of(task_id) == []
    assert harness.recorder.shape(task_id) == ["start:1", "stop:1:failed:retry", "start:2", "stop:2:completed"]


async def test_shutdowns_never_use_up_attempts_but_other_releases_do(harness: Harness) -> None:
    worker = harness.worker()
    await worker.start()
    shut_down = await harness.create("fail-below:4:shutdown;ok", source="user", max_attempts=1)
    outage = await harness.create("fail:database", source="user", max_attempts=2)

    assert (await harness.wait_status(shut_down, "completed"))["attempt_count"] == 4
    row = await harness.wait_status(outage, "dead-letter")
    assert (row["attempt_count"], row["last_error_class"]) == (2, "database")


async def test_a_transient_failure_that_clears_completes_on_a_later_attempt(harness: Harness) -> None:
    worker = harness.worker()
    await worker.start()
    task_id = await harness.create("fail-below:3:rate_limit;ok", source="self-update", max_attempts=5)

    row = await harness.wait_status(task_id, "completed")

    assert row["attempt_count"] == 3
    assert await harness.remediations_of(task_id) == []
    assert harness.recorder.shape(task_id)[-1] == "stop:3:completed"


async def test_five_failures_dead_letter_with_five_errors_and_bounded_backoff(harness: Harness) -> None:
    """RELIABILITY #5 under a controlled clock: each retry's delay lies in [ceiling/2, ceiling],
    ceiling = min(cap, base * 2**(n-1)) (model.Backoff); after 5 failures dead-letter, 5 errors.

    The delays are long (base 100 s, cap 500 s, reached by the fourth); the test moves each due
    time to now itself once it has read it, so no delay is waited out and each one is read from
    the queued row, from the two timestamps the failing statement wrote.
    """
    backoff = Backoff(100.0, 500.0)
    worker = harness.worker(backoff=backoff)
    await worker.start()
    task_id = await harness.create("fail:provider", source="self-update", max_attempts=5)

    delays = []
    for attempt in range(1, 5):
        row = await eventually(
            lambda: harness.row(task_id),
            until=lambda r, a=attempt: (r["status"], r["attempt_count"]) == ("queued", a),
            within=10,
            interval=0.02,
        )
        delays.append((row["next_attempt_at"] - row["finished_at"]).total_seconds())
        await harness.pool.execute(
            "UPDATE popagent_agent_tasks SET next_attempt_at = clock_timestamp() WHERE id = $1", task_id
        )
        worker.wake()
    row = await harness.wait_status(task_id, "dead-letter")

    ceilings = [backoff.ceiling(attempt) for attempt in range(1, 5)]
    assert ceilings == [100.0, 200.0, 400.0, 500.0]
    # Two clock_timestamp() calls of one statement are microseconds apart.
    for delay, ceiling in zip(delays, ceilings, strict=True):
        assert ceiling / 2 - 0.001 <= delay <= ceiling + 0.001, (delays, ceilings)
    assert row["attempt_count"] == 5
    errors = [p for p in await harness.progress(task_id) if p["kind"] in ("retry_scheduled", "dead_letter")]
    assert [(p["attempt"], p["kind"]) for p in errors] == [(n, "retry_scheduled") for n in range(1, 5)] + [
        (5, "dead_letter")
    ]
    assert all("(provider)" in p["message"] for p in errors)


async def test_remediation_tasks_never_create_remediation(harness: Harness) -> None:
    worker = harness.worker()
    await worker.start()
    task_id = await harness.create("fail:validation")
    await harness.wait_status(task_id, "failed")
    [remediation] = await harness.remediations_of(task_id)

    # The remediation's own prompt is prose, which the scripted executor rejects: it fails too.
    failed = await harness.wait_status(remediation["id"], "failed")

    assert failed["kind"] == "remediation"
    assert failed["parent_task_id"] == task_id
    assert await harness.remediations_of(remediation["id"]) == []
    total = await harness.pool.fetchval("SELECT count(*) FROM popagent_agent_tasks WHERE kind = 'remediation'")
    assert total == 1


async def test_a_timeout_aborts_the_executor_and_is_retry_eligible_only_for_self_update(harness: Harness) -> None:
    worker = harness.worker(task_timeout_s=0.3)
    await worker.start()
    user_task = await harness.create("sleep:30", source="user")
    self_update = await harness.create("sleep:30", source="self-update", max_attempts=2)

    user_row = await harness.wait_status(user_task, "failed")
    self_row = await harness.wait_status(self_update, "dead-letter")

    assert (user_row["attempt_count"], user_row["last_error_class"]) == (1, "timeout")
    assert (self_row["attempt_count"], self_row["last_error_class"]) == (2, "timeout")
    assert harness.recorder.shape(self_update) == ["start:1", "stop:1:failed:retry", "start:2", "stop:2:dead-letter"]


async def test_a_timed_out_executor_that_ignores_abort_holds_its_row_and_slot_until_it_settles(
    harness: Harness,
) -> None:
    executor = ScriptedExecutor()
    worker = harness.worker(executor, concurrency=1, task_timeout_s=0.2, abort_ack_s=0.2)
    await worker.start()
    hung = await harness.create("release:late", source="self-update", max_attempts=3)
    waiting = await harness.create("ok")

    await eventually(lambda: "stop:1:interrupted" in harness.recorder.shape(hung))

    row = await harness.row(hung)
    assert (row["status"], row["attempt_count"]) == ("running", 1)
    assert await harness.status(waiting) == "queued"
    # Even a recovery pass in this runtime, with the heartbeat back-dated, leaves it alone.
    await harness.backdate_heartbeat(hung, 3600)
    await worker.recover()
    assert (await harness.row(hung))["status"] == "running"
    assert executor.calls == [(str(hung), 1)]

    executor.gate("late").set()
    await harness.wait_status(waiting, "completed")
    retried = await harness.row(hung)

    assert retried["last_error_class"] == "timeout"
    stop = [e for e in harness.recorder.for_task(hung) if isinstance(e, TaskStopped)]
    assert stop[0].status == "interrupted" and stop[0].abort_reason == "timeout"
    assert stop[1].status == "failed" and stop[1].will_retry


async def test_failing_observers_never_change_the_durable_outcome(harness: Harness) -> None:
    broken = Recorder(fail=True)
    worker = harness.worker(observers=[broken, harness.recorder])
    await worker.start()
    done = await harness.create("ok")
    failed = await harness.create("fail:validation")

    assert (await harness.wait_status(done, "completed"))["attempt_count"] == 1
    assert (await harness.wait_status(failed, "failed"))["attempt_count"] == 1
    # The broken observer was called, and the next one still heard about everything.
    assert len(broken.for_task(done)) == 2
    assert harness.recorder.shape(done) == ["start:1", "stop:1:completed"]
    assert harness.recorder.shape(failed) == ["start:1", "stop:1:failed"]
