"""The turn log across a NATS cluster that loses its quorum for a while: batches appended while
no server can store them (the turn log's stream has no leader: a core publish then is dropped,
silently) are all in the log, once and in order, when the turn ends."""

from __future__ import annotations

from pathlib import Path

import pytest

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from popagent_agent_runner.turn.log import STREAM, TurnLog
from popagent_core import bus
from popagent_dev import embedded
from support.cluster import Cluster, ClusterConfig
from support.waiting import eventually


def text(number: int) -> pb.TurnEventBatch:
    return pb.TurnEventBatch(events=[pb.TurnEvent(text_delta=pb.TextDelta(part_id="t", delta=f"{number} "))])


async def no_longer_running() -> bool:
    return False


@pytest.mark.timeout(150)
async def test_batches_appended_while_the_stream_has_no_leader_are_all_stored(tmp_path: Path) -> None:
    cluster = Cluster(ClusterConfig(tmp_path, database_url="", observability_url="", model_url=""))
    (tmp_path / "logs").mkdir()
    cluster.start_nats()
    try:
        async with bus.connect(cluster.nats_url("agent-runner"), name="agent-runner") as client:
            log = TurnLog(client)
            await log.ensure_stream(replicas=3)
            turn_id = "quorum-turn"
            for number in range(5):
                await log.append(turn_id, text(number))
            assert await log.settle(turn_id)

            # Two of three servers gone: nothing can be stored until one is back.
            for server in cluster.nats[1:]:
                server.kill()
            await eventually(lambda: client.is_connected, within=20, what="the client on the server left")
            for number in range(5, 40):
                await log.append(turn_id, text(number))
            cluster.nats[1].start()
            await log.end(turn_id, "completed", within_s=60)

            ended: list[str] = []
            texts = [
                event.text_delta.delta
                async for stored in log.follow(turn_id, running=no_longer_running, idle_check_s=10, on_end=ended.append)
                for event in stored.events
            ]
            assert texts == [f"{number} " for number in range(40)]
            assert ended == ["completed"]
            # No event twice (above), and the batches that waited through the outage went together:
            # fewer messages than the 40 batches and the end marker.
            assert (await log.js.stream_info(STREAM)).state.messages < 41
    finally:
        for server in cluster.nats:
            if server.process is not None and server.process.process.poll() is None:
                server.stop()


async def test_a_runner_taking_a_turn_over_appends_after_what_the_lost_one_stored(
    nats_server: embedded.NatsProcess,
) -> None:
    """The new runner's writer expects an empty subject, is refused, reads where the log stands
    and appends after it: nothing of the lost runner's is overwritten or doubled."""
    async with (
        bus.connect(nats_server.url, name="lost-runner") as lost_client,
        bus.connect(nats_server.url, name="new-runner") as new_client,
    ):
        lost, taking_over = TurnLog(lost_client), TurnLog(new_client)
        await lost.ensure_stream()
        for number in range(3):
            await lost.append("taken-over", text(number))
        assert await lost.settle("taken-over")
        for number in range(3, 6):
            await taking_over.append("taken-over", text(number))
        await taking_over.end("taken-over", "completed")
        texts = [
            event.text_delta.delta
            async for stored in taking_over.follow("taken-over", running=no_longer_running, idle_check_s=5)
            for event in stored.events
        ]
        assert texts == [f"{number} " for number in range(6)]
        await lost.aclose()
