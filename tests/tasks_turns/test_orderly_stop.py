"""An agent-runner that stops while a task turn runs answers the call with SHUTDOWN (the
tasks worker requeues it without using up an attempt) instead of a cancelled call, which
used to fail a user task permanently (issue 22, finding 2)."""

from __future__ import annotations

import asyncio
import time
import uuid

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from popagent.agent_runner.v1 import agent_runner_pb2_grpc
from popagent_agent_runner.service import SERVER_GRACE_S, TASK_TURN_GRACE_S
from popagent_core.grpc_client import open_channel
from popagent_tasks.agent_runner_executor import error_class_of
from popagent_tasks.model import RELEASED, ErrorClass
from support.model_gateway import Turn
from support.stacks import MODEL, Stack
from support.waiting import eventually


async def test_a_stopping_agent_runner_releases_its_running_task_turn(stack: Stack) -> None:
    # About 8 s of streaming: longer than the stop's grace for task turns.
    stack.models.push(Turn.say("word " * 80, chunk_size=5, chunk_delay_s=0.1))
    task_id = str(uuid.uuid4())
    request = pb.RunTaskRequest(
        task_id=task_id,
        attempt=1,
        turn_id=uuid.uuid4().hex,
        trace_id=uuid.uuid4().hex,
        prompt="Write a long report",
        model=MODEL,
        thread_id=f"task-thread-{task_id}",
        workspace_id="popagent",
        execution_source="user",
        kind="task",
        deadline_s=60,
    )
    events: list[pb.TaskTurnEvent] = []
    runner = stack.extra_runner()
    address = await runner.__aenter__()
    async with open_channel(address, stack.tokens["tasks"]) as channel:
        stub = agent_runner_pb2_grpc.AgentRunnerTaskServiceStub(channel)

        async def consume() -> None:
            async for event in stub.RunTask(request):
                events.append(event)

        call = asyncio.create_task(consume())
        await eventually(lambda: len(stack.models.requests) == 1, what="the turn's model call")
        stopping = time.monotonic()
        # The runner's own unwinding is its SIGTERM path.
        stop = asyncio.create_task(runner.__aexit__(None, None, None))
        async with asyncio.timeout(TASK_TURN_GRACE_S + SERVER_GRACE_S + 2):
            await call
            answered_in = time.monotonic() - stopping
            await stop
    [result] = [event.result for event in events if event.HasField("result")]
    assert not result.ok
    assert result.failure_class == pb.TURN_FAILURE_SHUTDOWN
    assert error_class_of(result.failure_class) is ErrorClass.SHUTDOWN
    assert ErrorClass.SHUTDOWN in RELEASED
    # Within the task turns' grace, not after the server's cancelled everything.
    assert answered_in < TASK_TURN_GRACE_S + 1.5
