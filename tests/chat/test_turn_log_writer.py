"""The turn log's writer against a real NATS server: a message larger than the server takes is
left out of the log, and the turn's later batches and its end marker are stored as usual (retried,
it held every later batch in memory and the turn's end for its whole settle time)."""

from __future__ import annotations

from pathlib import Path

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from popagent_agent_runner.turn.log import TurnLog
from popagent_core import bus
from popagent_dev import embedded


def text(value: str) -> pb.TurnEventBatch:
    return pb.TurnEventBatch(events=[pb.TurnEvent(text_delta=pb.TextDelta(part_id="t", delta=value))])


async def no_longer_running() -> bool:
    return False


async def test_a_message_larger_than_the_server_takes_is_left_out_and_the_turn_goes_on(tmp_path: Path) -> None:
    nats = embedded.start_nats(tmp_path / "nats")
    try:
        async with bus.connect(nats.url, name="agent-runner") as client:
            log = TurnLog(client)
            await log.ensure_stream()
            turn_id = "oversized-turn"
            argument = "x" * (client.max_payload + 1)
            huge = pb.TurnEventBatch(
                events=[pb.TurnEvent(tool_input=pb.ToolInput(tool_call_id="c1", tool_name="t", input_json=argument))]
            )
            await log.append(turn_id, text("before "))
            await log.append(turn_id, huge)
            await log.append(turn_id, text("after"))
            # Generous: the point is that it settles at all, not how fast.
            assert await log.settle(turn_id, within_s=60)
            await log.end(turn_id, "completed", within_s=60)
            ended: list[str] = []
            stored = [
                event
                async for batch in log.follow(turn_id, running=no_longer_running, idle_check_s=10, on_end=ended.append)
                for event in batch.events
            ]
            assert [event.text_delta.delta for event in stored] == ["before ", "after"]
            assert ended == ["completed"]
    finally:
        nats.stop()
