"""Queued turns are durable records (docs/turns.md, Double texting): a queued turn shows with its
session, runs when its time comes even after its caller left or its runner stopped, and can be
cancelled before it runs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from popagent.agent_runner.v1 import agent_runner_pb2_grpc
from popagent_core.grpc_client import open_channel
from support.model_gateway import Turn
from support.stacks import MODEL, Stack
from support.waiting import eventually

from .helpers import new_session, user_message

ANSWER = "q" * 60


def paced(_body: Any) -> Turn:
    return Turn.say(ANSWER, chunk_size=4, chunk_delay_s=0.05)  # about 0.75 s of streaming


async def queued_send(
    client: httpx.AsyncClient, session: str, text: str
) -> tuple[httpx.Response, AsyncIterator[str], dict[str, Any]]:
    """POST /api/chat with 'enqueue' while a turn runs: the open response, its lines and its first chunk."""
    body = {"id": session, "model": MODEL, "message": user_message(text), "doubleTexting": "enqueue"}
    response = await client.send(client.build_request("POST", "/api/chat", json=body), stream=True)
    assert response.status_code == 200
    lines = response.aiter_lines()
    async for line in lines:
        if line.startswith("data: "):
            return response, lines, orjson.loads(line.removeprefix("data: "))
    raise AssertionError("no chunk")


async def running_turn(stack: Stack, client: httpx.AsyncClient, session: str) -> asyncio.Task[httpx.Response]:
    task = asyncio.create_task(
        client.post("/api/chat", json={"id": session, "model": MODEL, "message": user_message("first")})
    )

    async def running() -> int:
        async with stack.db() as conn:
            running = await conn.fetchval(
                "SELECT count(*) FROM popagent_turns WHERE session_id = $1 AND status = 'running'", session
            )
        return int(running or 0)

    await eventually(running, what="the first turn to run")
    return task


async def session_of(client: httpx.AsyncClient, session: str) -> dict[str, Any]:
    return (await client.get(f"/api/sessions/{session}")).json()


def texts(session: dict[str, Any]) -> list[str]:
    return ["".join(p["text"] for p in m["parts"] if p["type"] == "text") for m in session["messages"]]


@pytest.mark.timeout(60)
async def test_a_queued_turn_shows_with_its_session_and_runs_after_its_caller_left(stack: Stack) -> None:
    stack.models.responder = paced
    async with stack.client() as client:
        session = await new_session(client)
        first = await running_turn(stack, client, session)
        response, _, queued = await queued_send(client, session, "second")
        assert queued == {
            "type": "data-turnQueued",
            "data": {"turnId": queued["data"]["turnId"], "ahead": 1},
            "transient": True,
        }
        shown = await session_of(client, session)
        [waiting] = shown["queuedTurns"]
        assert waiting["turnId"] == queued["data"]["turnId"] and waiting["queuedAt"]
        assert waiting["message"]["role"] == "user" and waiting["message"]["parts"] == [
            {"type": "text", "text": "second"}
        ]
        await response.aclose()  # the caller leaves while its turn waits
        assert (await first).status_code == 200

        async def answered() -> list[str]:
            return texts(await session_of(client, session))

        assert await eventually(answered, until=lambda t: t[-1:] == [ANSWER] and len(t) == 4, within=30) == [
            "first",
            ANSWER,
            "second",
            ANSWER,
        ]
        assert (await session_of(client, session))["queuedTurns"] == []


@pytest.mark.timeout(60)
async def test_a_queued_turn_cancelled_before_it_runs_ends_its_stream_and_never_runs(stack: Stack) -> None:
    stack.models.responder = paced
    async with stack.client() as client:
        session = await new_session(client)
        first = await running_turn(stack, client, session)
        response, lines, queued = await queued_send(client, session, "never")
        turn_id = queued["data"]["turnId"]
        cancelled = await client.post(f"/api/sessions/{session}/turns/{turn_id}/cancel")
        assert cancelled.status_code == 200 and cancelled.json() == {"turnId": turn_id, "status": "cancelled"}
        rest = [line async for line in lines if line]
        await response.aclose()
        assert rest == ["id: 0", 'data: {"type":"abort"}', "data: [DONE]"], rest
        assert (await first).status_code == 200
        again = await client.post(f"/api/sessions/{session}/turns/{turn_id}/cancel")
        assert again.status_code == 409
        await asyncio.sleep(0.5)
        assert texts(await session_of(client, session)) == ["first", ANSWER]
    assert len(stack.models.requests) == 1


@pytest.mark.timeout(90)
async def test_a_queued_turn_whose_runner_stopped_runs_on_another(stack: Stack) -> None:
    stack.models.responder = paced
    async with stack.client() as client:
        session = await new_session(client)
        first = await running_turn(stack, client, session)
        # Queued straight on a runner that then stops (its caller's stream ends with the call).
        async with stack.extra_runner() as address, open_channel(address, stack.tokens["gateway"]) as channel:
            call = agent_runner_pb2_grpc.AgentRunnerServiceStub(channel).Chat(
                pb.ChatRequest(
                    session_id=session,
                    model=MODEL,
                    message_json=orjson.dumps(user_message("survivor")).decode(),
                    double_texting="enqueue",
                )
            )
            batch = await anext(aiter(call))
            assert batch.events[0].HasField("queued")
            turn_id = batch.events[0].queued.turn_id
        call.cancel()
        assert (await first).status_code == 200

        async def status() -> tuple[str, str]:
            async with stack.db() as conn:
                row = await conn.fetchrow("SELECT status, runner_id FROM popagent_turns WHERE id = $1", turn_id)
            assert row is not None
            return row["status"], row["runner_id"]

        # Well inside the 30 s lease: a stopping runner lets go of its queued turn, even one whose
        # caller left at that very moment, instead of leaving it for when its lease passes.
        ended, runner = await eventually(status, until=lambda s: s[0] not in ("queued", "running"), within=15)
        assert ended == "completed" and not runner.endswith(address.rpartition(":")[2])
        assert texts(await session_of(client, session)) == ["first", ANSWER, "survivor", ANSWER]
