"""Durable chat turns (docs/turns.md): a turn outlives its client, any client (through any gateway)
follows it from its log, byte for byte what the first client got, and a user cancels it by command."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import httpx
import orjson
import pytest

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from popagent.agent_runner.v1 import agent_runner_pb2_grpc
from popagent_core.grpc_client import open_channel
from support.model_gateway import Turn
from support.stacks import API_KEY, MODEL, Stack
from support.waiting import eventually

from .helpers import new_session, recorded_turn, streamed_on_runner, user_message

SLOW = {"chunk_size": 4, "chunk_delay_s": 0.05}  # 40 chunks of "w" * 160: about 2 s


def events_of(body: bytes) -> list[bytes]:
    """The SSE events of a body, each as its bytes (`id: n\\ndata: ...`), [DONE] included."""
    return [event for event in body.split(b"\n\n") if event]


def chunk_of(event: bytes) -> Any:
    data = event.split(b"data: ", 1)[1]
    return data.decode() if data == b"[DONE]" else orjson.loads(data)


def event_id(event: bytes) -> int:
    return int(event.split(b"\n", 1)[0].removeprefix(b"id: "))


class OpenTurn:
    """POST /api/chat left open after its first text delta: the events read so far and the turn id."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.raw = response.aiter_raw()
        self.events: list[bytes] = []
        self._buffer = b""

    async def read_until(self, marker: bytes) -> None:
        async for data in self.raw:
            self._buffer += data
            *complete, self._buffer = self._buffer.split(b"\n\n")
            self.events += [event for event in complete if event]
            if any(marker in event for event in self.events):
                return

    @property
    def turn_id(self) -> str:
        return chunk_of(self.events[0])["messageMetadata"]["turnId"]

    async def rest(self) -> list[bytes]:
        """Every event of the response: those read so far, then the rest to its end."""
        body = self._buffer + b"".join([data async for data in self.raw])
        await self.response.aclose()
        return self.events + events_of(body)


async def started_turn(client: httpx.AsyncClient, session: str, text: str) -> OpenTurn:
    request = client.build_request(
        "POST", "/api/chat", json={"id": session, "model": MODEL, "message": user_message(text)}
    )
    response = await client.send(request, stream=True)
    assert response.status_code == 200, await response.aread()
    turn = OpenTurn(response)
    await turn.read_until(b'"text-delta"')
    return turn


async def followed(client: httpx.AsyncClient, session: str, **headers: str) -> httpx.Response:
    return await client.get(f"/api/chat/{session}/stream", headers=headers)


async def test_a_client_that_goes_away_leaves_the_turn_running_to_a_stored_answer(stack: Stack) -> None:
    stack.models.push(Turn.say("w" * 160, **SLOW))
    async with stack.client() as client:
        session = await new_session(client)
        turn = await started_turn(client, session, "keep going")
        await turn.response.aclose()

        async def status() -> str | None:
            async with stack.db() as conn:
                return await conn.fetchval("SELECT status FROM popagent_turns WHERE session_id = $1", session)

        assert (
            await eventually(status, until=lambda s: s != "running", within=30, what="the turn to end") == "completed"
        )
        _, assistant = await recorded_turn(stack, session)
        assert "interrupted" not in assistant["metadata"]
    assert "".join(p["text"] for p in assistant["parts"] if p["type"] == "text") == "w" * 160
    assert stack.models.disconnected == 0


@pytest.mark.timeout(90)
async def test_a_follower_gets_the_same_bytes_from_the_start_and_after_its_last_event_id_through_any_gateway(
    stack: Stack,
) -> None:
    stack.models.push(Turn.say("w" * 160, **SLOW))
    async with stack.client() as client, stack.extra_gateway() as other_url:
        session = await new_session(client)
        turn = await started_turn(client, session, "follow me")
        # A second tab on another gateway, from the start; a reloaded page from the middle.
        other = httpx.AsyncClient(base_url=other_url, headers={"x-popagent-key": API_KEY}, timeout=60)
        async with other:
            resumed_at = event_id(turn.events[-1])
            from_start, from_middle = await asyncio.gather(
                followed(other, session), followed(client, session, **{"Last-Event-ID": str(resumed_at)})
            )
            uninterrupted = await turn.rest()
    assert from_start.status_code == from_middle.status_code == 200
    assert from_start.headers["x-vercel-ai-ui-message-stream"] == "v1"
    assert events_of(from_start.content) == uninterrupted
    assert events_of(from_middle.content) == [e for e in uninterrupted if b"[DONE]" in e or event_id(e) > resumed_at]
    assert [event_id(e) for e in uninterrupted[:-1]] == list(range(len(uninterrupted) - 1))
    assert chunk_of(uninterrupted[-2])["type"] == "finish" and chunk_of(uninterrupted[-1]) == "[DONE]"
    assert chunk_of(uninterrupted[0])["messageMetadata"]["turnId"] == turn.turn_id

    # The turn ended: nothing to follow (the AI SDK's resume expects 204).
    async with stack.client() as client:
        assert (await followed(client, session)).status_code == 204


async def test_following_answers_204_without_a_running_turn_404_for_an_unknown_session_and_400_for_a_bad_id(
    stack: Stack,
) -> None:
    async with stack.client() as client:
        session = await new_session(client)
        assert (await followed(client, session)).status_code == 204
        missing = await followed(client, "no-such-session")
        assert missing.status_code == 404, missing.text
        bad = await followed(client, session, **{"Last-Event-ID": "-1"})
        assert bad.status_code == 422 and "last-event-id" in bad.text.lower()


@pytest.mark.timeout(60)
async def test_cancel_ends_every_stream_with_abort_and_stores_the_partial_answer_marked_cancelled(stack: Stack) -> None:
    stack.models.push(Turn.say("w" * 400, **SLOW))
    async with stack.client() as client:
        session = await new_session(client)
        turn = await started_turn(client, session, "stop me")
        turn_id = turn.turn_id
        follower = asyncio.create_task(followed(client, session))
        cancelled = await client.post(f"/api/sessions/{session}/turns/{turn_id}/cancel")
        assert cancelled.status_code == 200, cancelled.text
        assert cancelled.json() == {"turnId": turn_id, "status": "cancelled"}
        events = await turn.rest()
        followed_events = events_of((await follower).content)
        for stream in (events, followed_events):
            assert [chunk_of(e) for e in stream[-2:]] == [{"type": "abort"}, "[DONE]"]
        assert followed_events == events
        # Cancelled: the model stream is abandoned; a second cancel finds the turn ended.
        await eventually(lambda: stack.models.disconnected == 1, within=10, what="the model stream to be abandoned")
        again = await client.post(f"/api/sessions/{session}/turns/{turn_id}/cancel")
        assert again.status_code == 409 and "already ended (cancelled)" in again.text
        unknown = await client.post(f"/api/sessions/{session}/turns/{'0' * 32}/cancel")
        assert unknown.status_code == 404, unknown.text
    _, assistant = await recorded_turn(stack, session)
    assert assistant["metadata"]["cancelled"] is True and "interrupted" not in assistant["metadata"]
    streamed = "".join(p["text"] for p in assistant["parts"] if p["type"] == "text")
    assert streamed and set(streamed) == {"w"} and len(streamed) < 400


@pytest.mark.timeout(90)
async def test_a_turn_followed_through_another_runner_goes_on_when_its_runner_stops(stack: Stack) -> None:
    """The turn runs on one agent-runner and is followed through another. The first stops while the
    turn streams (past its grace): it hands the turn over, its own call ends UNAVAILABLE, and the
    follower sees the turn begin again on the runner that took it over and finish."""
    stack.models.push(Turn.say("word " * 100, chunk_size=5, chunk_delay_s=0.1), Turn.say("again " * 10))
    async with stack.client() as client:
        session = await new_session(client)
    runner = stack.extra_runner()
    address = await runner.__aenter__()
    streamed: list[pb.TurnEvent] = []
    async with (
        open_channel(address, stack.tokens["gateway"]) as running_channel,
        open_channel(stack.runner_address, stack.tokens["gateway"]) as following_channel,
    ):
        running = agent_runner_pb2_grpc.AgentRunnerServiceStub(running_channel)
        following = agent_runner_pb2_grpc.AgentRunnerServiceStub(following_channel)
        call = asyncio.create_task(streamed_on_runner(running, session, "long", streamed))
        await eventually(lambda: any(e.HasField("text_delta") for e in streamed), what="streamed text")
        follow = following.FollowTurn(pb.FollowTurnRequest(session_id=session))
        followed_events: list[pb.TurnEvent] = []

        async def read_followed() -> None:
            async for batch in follow:
                followed_events.extend(batch.events)

        reading = asyncio.create_task(read_followed())
        await eventually(lambda: len(followed_events) >= 3, what="the follower to catch up")
        await runner.__aexit__(None, None, None)
        with pytest.raises(grpc.aio.AioRpcError) as handed_over:
            await asyncio.wait_for(call, 30)
        assert handed_over.value.code() is grpc.StatusCode.UNAVAILABLE
        await asyncio.wait_for(reading, 30)
    # What the stopped runner streamed, then the turn from its new start to its finish.
    assert [e.SerializeToString() for e in followed_events[: len(streamed)]] == [
        e.SerializeToString() for e in streamed
    ]
    starts = [e for e in followed_events if e.HasField("start")]
    assert len(starts) == 2 and starts[0].start.turn_id == starts[1].start.turn_id
    assert followed_events[-1].HasField("finish")
    async with stack.db() as conn:
        row = await conn.fetchrow("SELECT status, attempts FROM popagent_turns WHERE session_id = $1", session)
    assert row is not None and (row["status"], row["attempts"]) == ("completed", 2)
    _, assistant = await recorded_turn(stack, session)
    assert "".join(p["text"] for p in assistant["parts"] if p["type"] == "text") == "again " * 10


async def test_continue_on_disconnect_is_an_agent_runtime_setting_on_by_default(stack: Stack) -> None:
    async with stack.client() as client:
        assert (await client.get("/api/settings/agent-runtime")).json()["continueOnDisconnect"] is True
        refused = await client.patch("/api/settings/agent-runtime", json={"continueOnDisconnect": "sometimes"})
        assert refused.status_code in (400, 422), refused.text
