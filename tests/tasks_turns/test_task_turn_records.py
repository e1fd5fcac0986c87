"""A task attempt's turn is a turn record with a log, like a chat turn (docs/turns.md): followed
while it runs, ended with the attempt, and cancelled only through its task."""

from __future__ import annotations

import grpc
import pytest

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from popagent.agent_runner.v1 import agent_runner_pb2_grpc
from popagent_core.grpc_client import open_channel
from support.model_gateway import Turn
from support.stacks import Stack
from support.waiting import eventually


@pytest.mark.timeout(60)
async def test_a_task_turn_is_recorded_followed_from_its_log_and_cancelled_only_through_its_task(stack: Stack) -> None:
    stack.models.push(Turn.say("w" * 80, chunk_size=4, chunk_delay_s=0.05))
    task_id = await stack.create_task("Write it down")

    async def record() -> tuple[str, str, str] | None:
        async with stack.db() as conn:
            row = await conn.fetchrow("SELECT id, session_id, status FROM popagent_turns WHERE task_id = $1", task_id)
        return (row["id"], row["session_id"], row["status"]) if row is not None else None

    found = await eventually(record, what="the task turn's record")
    assert found is not None
    turn_id, session_id, status = found
    assert status == "running"
    async with open_channel(stack.runner_address, stack.tokens["gateway"]) as channel:
        runner = agent_runner_pb2_grpc.AgentRunnerServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await runner.CancelTurn(pb.CancelTurnRequest(session_id=session_id, turn_id=turn_id))
        assert refused.value.code() is grpc.StatusCode.FAILED_PRECONDITION
        assert f"cancel the task (POST /api/tasks/{task_id}/cancel)" in (refused.value.details() or "")
        followed = [
            event
            async for batch in runner.FollowTurn(pb.FollowTurnRequest(session_id=session_id))
            for event in batch.events
        ]
    assert followed[0].start.turn_id == turn_id
    assert "".join(e.text_delta.delta for e in followed if e.HasField("text_delta")) == "w" * 80
    assert followed[-1].HasField("finish")
    task = await stack.wait_task(task_id, "completed", "failed", "dead-letter")
    assert (task.status, task.outcome, task.turn_id) == ("completed", "w" * 80, turn_id)
    assert await eventually(record, until=lambda r: r is not None and r[2] != "running") == (
        turn_id,
        session_id,
        "completed",
    )
