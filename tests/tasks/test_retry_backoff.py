"""The retry delays on the way to a dead letter, read from durable records: after failed attempt n the
task is due again after a capped exponential delay with jitter, in [ceiling/2, ceiling] with
ceiling = min(cap, base * 2**(n-1)), and no attempt is claimed before it is due.

tests/tasks/test_worker.py checks only an upper bound, which a worker that retried at once would pass.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from popagent_tasks.model import Backoff
from popagent_tasks.observer import TaskStopped
from tasks.harness import Harness

# A delay is measured from the failure's progress row, written one statement after the update that
# set next_attempt_at (both on the database clock): the measure falls short of the delay by that
# statement's round trip (20 ms seen on a loaded machine, over 90 ms at a load average of 20 on two
# cores), and never exceeds it. Below the smallest half-ceiling (0.2 s), so a retry at once still
# fails the check.
SHORT_BY_AT_MOST_S = 0.15
CLOCK_SLACK_S = 0.005


async def test_each_retry_before_the_dead_letter_waits_its_capped_exponential_delay(harness: Harness) -> None:
    # Ceilings 0.4, 0.8, 1.2 (capped from 1.6) and 1.2 s (from 3.2): a retry at once, a delay that never
    # grows and one that is never capped each leave one of the ranges below.
    base, cap = 0.4, 1.2
    worker = harness.worker(backoff=Backoff(base, cap))
    await worker.start()
    task_id = await harness.create("fail:provider", source="self-update", max_attempts=5)

    row = await harness.wait_status(task_id, "dead-letter")

    assert row["attempt_count"] == 5
    failures = [p for p in await harness.progress(task_id) if p["kind"] in ("retry_scheduled", "dead_letter")]
    failed_at: dict[int, datetime] = {p["attempt"]: p["created_at"] for p in failures}
    assert [p["kind"] for p in failures] == ["retry_scheduled"] * 4 + ["dead_letter"]
    next_attempt_at = {
        e.task.attempt: datetime.fromisoformat(e.extra["nextAttemptAt"])
        for e in harness.recorder.for_task(task_id)
        if isinstance(e, TaskStopped) and e.will_retry
    }
    assert sorted(next_attempt_at) == [1, 2, 3, 4]
    for attempt in range(1, 5):
        ceiling = min(cap, base * 2 ** (attempt - 1))
        delay = (next_attempt_at[attempt] - failed_at[attempt]).total_seconds()
        assert ceiling / 2 - SHORT_BY_AT_MOST_S <= delay <= ceiling + CLOCK_SLACK_S, (attempt, delay, ceiling)
        # The next attempt ran (and failed) only once it was due.
        assert failed_at[attempt + 1] >= next_attempt_at[attempt] - timedelta(seconds=CLOCK_SLACK_S), attempt
