"""Runners come and go while the stack runs (docs/turns.md, Routing): the gateway sends turns to the
agent-runners that announce themselves, a stopping runner takes no new turn and finishes its own, and
a cancel reaches a turn whichever runner holds it."""

from __future__ import annotations

import asyncio
import uuid

import httpx
import nats
import orjson
import pytest

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from popagent.agent_runner.v1 import agent_runner_pb2_grpc
from popagent_agent_runner.service import runner_name
from popagent_core import subjects
from popagent_core.grpc_client import open_channel
from popagent_dev.embedded import free_port
from popagent_gateway.runners import rendezvous
from support.model_gateway import Body, Turn
from support.stacks import MODEL, Stack
from support.waiting import eventually

from .helpers import chat, new_session, recorded_turn, user_message

ANSWER = "w" * 60
# 15 chunks 60 ms apart: each turn streams for about a second.
PACED = {"chunk_size": 4, "chunk_delay_s": 0.06}


def sessions_preferring(runners: list[str], wanted: dict[str, int], others: int) -> list[str]:
    """Session ids: `wanted[address]` that rank `address` first among `runners`, and `others` more."""
    left, chosen = dict(wanted), []
    while any(left.values()) or others:
        session = f"routed-{uuid.uuid4().hex}"
        first = rendezvous(session, runners)[0]
        if left.get(first, 0) > 0:
            left[first] -= 1
        elif others and first not in wanted:
            others -= 1
        else:
            continue
        chosen.append(session)
    return chosen


async def turns_go_to(client: httpx.AsyncClient) -> str:
    """The runners the gateway sends turns to now, as /api/health names them."""
    health = await client.get("/api/health")
    return str(health.json()["components"]["service:agent-runner"]["detail"])


async def runners_of(stack: Stack, sessions: list[str]) -> set[str]:
    """The runners the sessions' turns run or ran on, as their records say now."""
    async with stack.db() as conn:
        rows = await conn.fetch("SELECT runner_id FROM popagent_turns WHERE session_id = ANY($1::text[])", sessions)
    return {row["runner_id"] for row in rows}


async def turn_runners(stack: Stack, sessions: list[str]) -> dict[str, tuple[str, str]]:
    """Each session's one turn: (status, runner id)."""
    async with stack.db() as conn:
        rows = await conn.fetch(
            "SELECT session_id, status, runner_id FROM popagent_turns WHERE session_id = ANY($1::text[])", sessions
        )
    assert len(rows) == len(sessions), "one turn per session"
    return {row["session_id"]: (row["status"], row["runner_id"]) for row in rows}


@pytest.mark.timeout(240)
async def test_a_runner_started_and_one_stopped_while_20_chats_run_lose_no_turn(stack: Stack) -> None:
    def answer(_body: Body) -> Turn:
        return Turn.say(ANSWER, **PACED)

    stack.models.responder = answer
    leaving_address, joining_address = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    every_runner = [*stack.runner_workers, leaving_address, joining_address]
    # Sessions whose turns rank the leaving and the joining runner first, and sessions for the others.
    leaving_first = sessions_preferring(every_runner, {leaving_address: 5}, others=0)
    joining_first = sessions_preferring(every_runner, {joining_address: 5}, others=0)
    others = sessions_preferring(every_runner, {}, others=10)
    sessions = [*leaving_first, *joining_first, *others]
    # Chats begin in three waves: before the new runner starts (some ranking the leaving one first),
    # once it runs (those that rank it first), and once the leaving runner began to stop (more of
    # its sessions, which must go elsewhere now).
    before, joined, after_stop = (
        [*leaving_first[:3], *others[:6]],
        [*joining_first, *others[6:8]],
        [
            *leaving_first[3:],
            *others[8:],
        ],
    )
    leaving = stack.extra_runner(leaving_address)
    joining = stack.extra_runner(joining_address)
    async with stack.client() as client:
        for session in sessions:
            created = await client.post("/api/sessions", json={"id": session, "title": "routed"})
            assert created.status_code == 201, created.text
        await leaving.__aenter__()
        try:
            # Each wave waits for what it is about (the gateway heard the runner join or stop), not
            # for a time: a loaded machine takes longer to start and announce a runner.
            await eventually(
                lambda: turns_go_to(client),
                until=lambda runners: leaving_address in runners,
                within=30,
                what="the gateway to send turns to the leaving runner",
            )
            chats = [asyncio.create_task(chat(client, session, "go")) for session in before]
            await asyncio.sleep(0.3)
            await joining.__aenter__()
            await eventually(
                lambda: turns_go_to(client),
                until=lambda runners: joining_address in runners,
                within=30,
                what="the gateway to send turns to the joining runner",
            )
            chats += [asyncio.create_task(chat(client, session, "go")) for session in joined]
            await asyncio.sleep(0.3)
            # The leaving runner took turns (its record says so while they run: a turn it hands over
            # on a loaded machine, past its stop's grace, is recorded on the runner that took it over).
            await eventually(
                lambda: runners_of(stack, leaving_first[:3]),
                until=lambda runners: runner_name(leaving_address) in runners,
                within=30,
                what="the leaving runner to take turns",
            )
            # Stopped while its turns stream: it finishes them (or hands them over) and takes no new one.
            stopping = asyncio.create_task(leaving.__aexit__(None, None, None))
            await eventually(
                lambda: turns_go_to(client),
                until=lambda runners: leaving_address not in runners,
                within=30,
                what="the gateway to hear that the leaving runner takes no new turn",
            )
            chats += [asyncio.create_task(chat(client, session, "go")) for session in after_stop]
            await stopping
            streams = await asyncio.gather(*chats)
        finally:
            await joining.__aexit__(None, None, None)
    for chunks in streams:
        assert [c["type"] for c in chunks if isinstance(c, dict) and c["type"] == "error"] == []
        assert chunks[-2]["type"] == "finish" and chunks[-1] == "[DONE]"
    turns = await turn_runners(stack, sessions)
    assert {status for status, _ in turns.values()} == {"completed"}
    ran_on = {runner for _, runner in turns.values()}
    assert runner_name(joining_address) in ran_on, "the runner that joined took turns"
    # Its sessions that chatted once it was stopping, though they rank it first, went elsewhere.
    assert all(turns[s][1] != runner_name(leaving_address) for s in leaving_first[3:])
    for session in sessions:
        _, assistant = await recorded_turn(stack, session)
        assert "".join(p["text"] for p in assistant["parts"] if p["type"] == "text") == ANSWER


@pytest.mark.timeout(60)
async def test_a_cancel_sent_to_another_runner_reaches_the_turn_where_it_runs(stack: Stack) -> None:
    stack.models.push(Turn.say("w" * 400, chunk_size=4, chunk_delay_s=0.05))
    async with stack.client() as client:
        session = await new_session(client)
        request = client.build_request(
            "POST", "/api/chat", json={"id": session, "model": MODEL, "message": user_message("stop me")}
        )
        response = await client.send(request, stream=True)
        assert response.status_code == 200
        body = response.aiter_raw()
        head = b""
        while b'"text-delta"' not in head:
            head += await anext(body)
        async with stack.db() as conn:
            row = await conn.fetchrow("SELECT id, runner_id FROM popagent_turns WHERE session_id = $1", session)
        assert row is not None
        turn_id, runner_id = row["id"], row["runner_id"]
        [elsewhere] = [address for address in stack.runner_workers if runner_name(address) != runner_id]
        async with open_channel(elsewhere, stack.tokens["gateway"]) as channel:
            answer = await agent_runner_pb2_grpc.AgentRunnerServiceStub(channel).CancelTurn(
                pb.CancelTurnRequest(session_id=session, turn_id=turn_id)
            )
        assert (answer.turn_id, answer.status) == (turn_id, "cancelled")
        rest = head + b"".join([data async for data in body])
        await response.aclose()
    assert rest.rstrip().endswith(b'data: {"type":"abort"}\n\ndata: [DONE]')
    _, assistant = await recorded_turn(stack, session)
    assert assistant["metadata"]["cancelled"] is True


async def test_a_cancel_for_a_runner_that_does_not_answer_is_503_and_changes_nothing(stack: Stack) -> None:
    async with stack.client() as client:
        session = await new_session(client)
        turn_id = uuid.uuid4().hex
        async with stack.db() as conn:
            # A turn whose runner is gone but whose lease has not passed yet.
            await conn.execute(
                "INSERT INTO popagent_turns (id, session_id, status, runner_id, lease_until) "
                "VALUES ($1, $2, 'running', 'gone-host:1', now() + interval '1 minute')",
                turn_id,
                session,
            )
        try:
            refused = await client.post(f"/api/sessions/{session}/turns/{turn_id}/cancel")
            assert refused.status_code == 503, refused.text
            async with stack.db() as conn:
                assert await conn.fetchval("SELECT status FROM popagent_turns WHERE id = $1", turn_id) == "running"
        finally:
            async with stack.db() as conn:
                await conn.execute(
                    "UPDATE popagent_turns SET status = 'interrupted', ended_at = now() WHERE id = $1", turn_id
                )


async def test_a_turn_sent_to_a_runner_that_is_gone_goes_to_the_next(stack: Stack) -> None:
    """A runner killed moments ago is still announced until its presence expires: the gateway finds
    nothing there and passes its turn on, with no error for the client."""
    ghost = f"127.0.0.1:{free_port()}"
    nc = await nats.connect(stack.nats_url)
    try:
        presence = {"runnerId": "killed-host:1", "address": ghost, "takingTurns": True}
        await nc.publish(subjects.RUNNER_PRESENCE, orjson.dumps(presence))
        await nc.flush()
    finally:
        await nc.close()
    [session] = sessions_preferring([*stack.runner_workers, ghost], {ghost: 1}, others=0)
    stack.models.push(Turn.say("still here"))
    async with stack.client() as client:
        assert (await client.post("/api/sessions", json={"id": session, "title": "routed"})).status_code == 201
        chunks = await chat(client, session, "anyone?")
    assert chunks[-2]["type"] == "finish"
    [(status, runner)] = (await turn_runners(stack, [session])).values()
    assert status == "completed" and runner in {runner_name(address) for address in stack.runner_workers}
