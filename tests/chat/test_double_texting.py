"""Concurrent turns on one session (issue 23, finding 3): the thread cache's race, and the
double-texting policy per session: 'reject' (409 with the running turn's id, the default) or
'enqueue' (the next turn waits for the running one)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import orjson
import pytest

from popagent_agent_runner.memory import THREAD_QUERIES
from popagent_agent_runner.memory.threads import ThreadStore
from support.model_gateway import Turn
from support.sse import read_sse
from support.stacks import MODEL, Stack

from .helpers import chat, chat_in_a_new_session, new_session, user_message

SLOW = {"chunk_size": 4, "chunk_delay_s": 0.05}  # 40 chunks: about 2 s


async def open_turn(client: httpx.AsyncClient, session: str, text: str) -> httpx.Response:
    """POST /api/chat, its response left open for streaming; the caller closes it."""
    request = client.build_request(
        "POST", "/api/chat", json={"id": session, "model": MODEL, "message": user_message(text)}
    )
    return await client.send(request, stream=True)


async def start_turn_id(lines: AsyncIterator[str]) -> str:
    """The turn id of the stream's start chunk."""
    async for line in lines:
        if line.startswith("data: {"):
            chunk = orjson.loads(line[6:])
            if chunk.get("type") == "start":
                return chunk["messageMetadata"]["turnId"]
    raise AssertionError("no start chunk")


@pytest.mark.timeout(60)
async def test_a_turn_sent_while_one_runs_is_refused_with_409_and_the_running_turns_id(stack: Stack) -> None:
    stack.models.push(Turn.say("a" * 160, **SLOW), Turn.say("after"))
    async with stack.client() as client:
        session = await new_session(client)
        assert (await client.get(f"/api/sessions/{session}")).json()["doubleTexting"] == "reject"
        running = await open_turn(client, session, "first")
        try:
            assert running.status_code == 200
            lines = running.aiter_lines()
            turn_id = await start_turn_id(lines)
            refused = await client.post(
                "/api/chat", json={"id": session, "model": MODEL, "message": user_message("second")}
            )
            assert refused.status_code == 409, refused.text
            assert refused.json()["runningTurnId"] == turn_id
            assert "already running" in refused.json()["error"]
            async for _ in lines:
                pass
        finally:
            await running.aclose()
        # Once it ended, the session takes the next turn.
        chunks = await chat(client, session, "third")
    assert "text-delta" in {chunk.get("type") for chunk in chunks if isinstance(chunk, dict)}
    assert chunks[-1] == "[DONE]"


@pytest.mark.timeout(90)
async def test_with_enqueue_concurrent_turns_on_one_session_all_run_one_after_another(stack: Stack) -> None:
    stack.models.push(*(Turn.say(f"answer {n} " + "b" * 40, chunk_size=8, chunk_delay_s=0.02) for n in range(5)))
    async with stack.client() as client:
        session = await new_session(client)
        patched = await client.patch(f"/api/sessions/{session}", json={"doubleTexting": "enqueue"})
        assert patched.status_code == 200, patched.text
        assert patched.json()["doubleTexting"] == "enqueue"

        async def turn(n: int) -> tuple[int, list[Any]]:
            body = {"id": session, "model": MODEL, "message": user_message(f"prompt {n}")}
            async with client.stream("POST", "/api/chat", json=body) as response:
                if response.status_code != 200:
                    await response.aread()
                    return response.status_code, [response.text]
                return 200, await read_sse(response)

        results = await asyncio.gather(*(turn(n) for n in range(5)))
    assert [status for status, _ in results] == [200] * 5, results
    for _, chunks in results:
        assert chunks[-1] == "[DONE]"
        assert not any(isinstance(c, dict) and c.get("type") == "error" for c in chunks), chunks
    # Each turn's prompt and answer are stored, in turn order: none interleaved with another.
    async with stack.client() as client:
        stored = (await client.get(f"/api/sessions/{session}")).json()["messages"]
    roles = [message["role"] for message in stored]
    assert roles == ["user", "assistant"] * 5


async def test_an_unknown_double_texting_policy_is_refused(stack: Stack) -> None:
    async with stack.client() as client:
        session = await new_session(client)
        response = await client.patch(f"/api/sessions/{session}", json={"doubleTexting": "interrupt"})
    assert response.status_code == 422


@pytest.mark.timeout(60)
async def test_the_history_cache_survives_a_turn_dropping_it_while_another_reads(stack: Stack) -> None:
    """The KeyError of finding 3: a prelude that read a current cached copy finds the entry
    dropped (by another turn's begin_turn) when its query returns."""
    stack.models.push(Turn.say("one"))
    session, _ = await chat_in_a_new_session(stack, "hello")
    pool = await asyncpg.create_pool(stack.dsn, min_size=1, max_size=2, server_settings={"search_path": "agent_runner"})
    try:
        threads = ThreadStore(pool, THREAD_QUERIES)
        await threads.prelude(session, "m-read-1", "again", 0)  # fills the cache at the current version
        assert session in threads._history
        reading = asyncio.create_task(threads.prelude(session, "m-read-2", "again", 0))
        await asyncio.sleep(0)  # the prelude took its cached copy and waits on the database
        threads._drop(session)  # what another turn's begin_turn does meanwhile
        state = await reading
    finally:
        await pool.close()
    assert [type(message).__name__ for message in state.history] == ["ModelRequest", "ModelResponse"]
