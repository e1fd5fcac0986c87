"""A tasks worker can die after its attempt's turn completed and before the task's transition is
stored; the recovered task's next attempt reaches agent-runner again. That attempt takes the
completed turn's answer instead of running the work twice (docs/turns.md, "Task turns")."""

from __future__ import annotations

import uuid

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from popagent.agent_runner.v1 import agent_runner_pb2_grpc
from popagent_core.grpc_client import open_channel
from support.model_gateway import Turn
from support.stacks import MODEL, Stack


def attempt_request(task_id: str, attempt: int) -> pb.RunTaskRequest:
    return pb.RunTaskRequest(
        task_id=task_id,
        attempt=attempt,
        turn_id=uuid.uuid4().hex,
        trace_id=uuid.uuid4().hex,
        prompt="Summarize the changelog",
        model=MODEL,
        thread_id=f"task-thread-{task_id}",
        workspace_id="popagent",
        execution_source="user",
        kind="task",
        deadline_s=60,
    )


async def run_attempt(stack: Stack, request: pb.RunTaskRequest) -> list[pb.TaskTurnEvent]:
    async with open_channel(stack.runner_address, stack.tokens["tasks"]) as channel:
        stub = agent_runner_pb2_grpc.AgentRunnerTaskServiceStub(channel)
        return [event async for event in stub.RunTask(request)]


def result_of(events: list[pb.TaskTurnEvent]) -> pb.TaskTurnResult:
    [result] = [event.result for event in events if event.HasField("result")]
    return result


async def task_turns(stack: Stack, task_id: str) -> list[tuple[str, str]]:
    async with stack.db() as conn:
        rows = await conn.fetch("SELECT id, status FROM popagent_turns WHERE task_id = $1 ORDER BY started_at", task_id)
    return [(row["id"], row["status"]) for row in rows]


async def test_the_next_attempt_takes_a_completed_turns_answer_and_runs_nothing_again(stack: Stack) -> None:
    task_id = str(uuid.uuid4())
    stack.models.push(Turn.say("The changelog adds two routes."))
    first = attempt_request(task_id, 1)
    answered = result_of(await run_attempt(stack, first))
    assert answered.ok and answered.outcome == "The changelog adds two routes."
    assert len(stack.models.requests) == 1

    # The worker that ran attempt 1 is gone before its transition; attempt 2 arrives.
    events = await run_attempt(stack, attempt_request(task_id, 2))
    adopted = result_of(events)
    assert adopted.ok and adopted.outcome == "The changelog adds two routes."
    assert len(stack.models.requests) == 1, "the work ran a second time"
    progress = [event.progress for event in events if event.HasField("progress")]
    assert any(first.turn_id in text and "nothing ran again" in text for text in progress), progress
    assert await task_turns(stack, task_id) == [(first.turn_id, "completed")]


async def test_an_attempt_after_a_failed_turn_runs_again(stack: Stack) -> None:
    task_id = str(uuid.uuid4())
    stack.models.push(Turn.fail(400, "the request was refused"), Turn.say("Done the second time."))
    failed = result_of(await run_attempt(stack, attempt_request(task_id, 1)))
    assert not failed.ok
    rerun = result_of(await run_attempt(stack, attempt_request(task_id, 2)))
    assert rerun.ok and rerun.outcome == "Done the second time."
    assert len(stack.models.requests) == 2
    assert [status for _, status in await task_turns(stack, task_id)] == ["failed", "completed"]
