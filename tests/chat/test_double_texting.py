"""Concurrent turns on one session (issue 23, finding 3): the thread cache's race, and the
double-texting policy, per session or per request (docs/turns.md): 'reject' (409 with the running
turn's id, the default), 'enqueue' (the next turn waits, durably queued), 'interrupt' (the running
turn is cancelled, its answer so far kept) and 'rollback' (the running turn is cancelled and its
prompt and answer dropped)."""

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


@pytest.mark.timeout(60)
@pytest.mark.parametrize("policy", ["reject", "enqueue", "interrupt"])
async def test_the_same_message_sent_again_follows_its_running_turn_under_any_policy(stack: Stack, policy: str) -> None:
    """A gateway that tries the next runner after one died before answering, or a client that
    retries, sends the same message again: that is its turn, followed, never refused, queued or
    run a second time."""
    stack.models.push(Turn.say("a" * 160, **SLOW), Turn.say("after"))
    async with stack.client() as client:
        session = await new_session(client)
        assert (await client.patch(f"/api/sessions/{session}", json={"doubleTexting": policy})).status_code == 200
        message = user_message("first")
        request = client.build_request("POST", "/api/chat", json={"id": session, "model": MODEL, "message": message})
        running = await client.send(request, stream=True)
        try:
            assert running.status_code == 200
            lines = running.aiter_lines()
            turn_id = await start_turn_id(lines)
            body = {"id": session, "model": MODEL, "message": message}
            async with client.stream("POST", "/api/chat", json=body) as again:
                assert again.status_code == 200, await again.aread()
                chunks = await read_sse(again)
            async for _ in lines:
                pass
        finally:
            await running.aclose()
        stored = (await client.get(f"/api/sessions/{session}")).json()["messages"]
    starts = [c for c in chunks if isinstance(c, dict) and c.get("type") == "start"]
    assert [c["messageMetadata"]["turnId"] for c in starts] == [turn_id]
    assert "".join(c["delta"] for c in chunks if isinstance(c, dict) and c.get("type") == "text-delta") == "a" * 160
    assert chunks[-2]["type"] == "finish" and chunks[-1] == "[DONE]"
    assert len(stack.models.requests) == 1, "the message ran twice"
    assert [(m["role"], m["id"] if m["role"] == "user" else None) for m in stored] == [
        ("user", message["id"]),
        ("assistant", None),
    ]


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
        response = await client.patch(f"/api/sessions/{session}", json={"doubleTexting": "sometimes"})
        assert response.status_code == 422
        body = {"id": session, "model": MODEL, "message": user_message("hi"), "doubleTexting": "sometimes"}
        refused = await client.post("/api/chat", json=body)
        assert refused.status_code == 422 and "doubleTexting" in refused.text
        for policy in ("enqueue", "interrupt", "rollback", "reject"):
            patched = await client.patch(f"/api/sessions/{session}", json={"doubleTexting": policy})
            assert patched.status_code == 200 and patched.json()["doubleTexting"] == policy


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


def paced(_body: Any) -> Turn:
    """Every model call answers slowly: about a second of streaming."""
    return Turn.say("c" * 80, chunk_size=4, chunk_delay_s=0.05)


async def send(client: httpx.AsyncClient, session: str, text: str, **body: Any) -> tuple[int, list[Any]]:
    """One POST /api/chat to its end: its status and its chunks."""
    request = {"id": session, "model": MODEL, "message": user_message(text), **body}
    async with client.stream("POST", "/api/chat", json=request) as response:
        if response.status_code != 200:
            await response.aread()
            return response.status_code, [response.text]
        return 200, await read_sse(response)


def ending(chunks: list[Any]) -> str:
    """How a stream ended: its last chunk's type before [DONE]."""
    assert chunks[-1] == "[DONE]", chunks
    return chunks[-2]["type"]


async def five_sends_over_a_running_turn(stack: Stack, policy: str) -> tuple[str, list[tuple[int, list[Any]]]]:
    """A session whose first turn streams, then five concurrent sends with `policy` (per request)."""
    stack.models.responder = paced
    async with stack.client() as client:
        session = await new_session(client)
        first = asyncio.create_task(send(client, session, "first"))
        await eventually_streaming(stack, session)
        sends = await asyncio.gather(*(send(client, session, f"send {n}", doubleTexting=policy) for n in range(5)))
        sends.append(await first)
    return session, sends


async def eventually_streaming(stack: Stack, session: str) -> None:
    """The session's turn is running and its prompt is stored."""
    for _ in range(200):
        async with stack.db() as conn:
            if await conn.fetchval(
                "SELECT count(*) FROM popagent_thread_messages WHERE thread_id = $1", session
            ) and await conn.fetchval(
                "SELECT count(*) FROM popagent_turns WHERE session_id = $1 AND status = 'running'", session
            ):
                return
        await asyncio.sleep(0.05)
    raise AssertionError("the first turn never ran")


async def stored_messages(stack: Stack, session: str) -> list[dict[str, Any]]:
    async with stack.client() as client:
        return (await client.get(f"/api/sessions/{session}")).json()["messages"]


def text_of(message: dict[str, Any]) -> str:
    return "".join(part["text"] for part in message["parts"] if part["type"] == "text")


@pytest.mark.timeout(90)
async def test_interrupt_cancels_what_runs_keeps_its_partial_answer_and_the_newest_send_completes(
    stack: Stack,
) -> None:
    session, sends = await five_sends_over_a_running_turn(stack, "interrupt")
    assert {status for status, _ in sends} == {200}, sends
    endings = [ending(chunks) for _, chunks in sends]
    assert endings.count("finish") == 1 and set(endings) == {"finish", "abort"}, endings
    stored = await stored_messages(stack, session)
    assert [m["role"] for m in stored] == ["user", "assistant"] * (len(stored) // 2)
    prompts = [text_of(m) for m in stored if m["role"] == "user"]
    # The first turn was streaming: its prompt and partial answer stay, marked cancelled. Sends cancelled
    # before their prompt passed the prompt hook may leave nothing; none is stored twice.
    assert prompts[0] == "first" and len(set(prompts)) == len(prompts)
    *cancelled, (last_prompt, last_answer) = list(zip(stored[::2], stored[1::2], strict=True))
    for _, answer in cancelled:
        assert answer["metadata"]["cancelled"] is True
    assert "cancelled" not in last_answer["metadata"] and text_of(last_answer) == "c" * 80
    [finished] = [chunks for _, chunks in sends if ending(chunks) == "finish"]
    assert text_of(last_prompt) in {f"send {n}" for n in range(5)}
    assert finished[0]["messageMetadata"]["turnId"]
    async with stack.db() as conn:
        statuses = await conn.fetch("SELECT status FROM popagent_turns WHERE session_id = $1", session)
    assert sorted(row["status"] for row in statuses) == ["cancelled"] * 5 + ["completed"]


@pytest.mark.timeout(90)
async def test_rollback_cancels_what_runs_and_drops_it_so_only_the_newest_send_remains(stack: Stack) -> None:
    session, sends = await five_sends_over_a_running_turn(stack, "rollback")
    assert {status for status, _ in sends} == {200}, sends
    endings = [ending(chunks) for _, chunks in sends]
    assert endings.count("finish") == 1 and set(endings) == {"finish", "abort"}, endings
    stored = await stored_messages(stack, session)
    assert [m["role"] for m in stored] == ["user", "assistant"]
    assert text_of(stored[0]) in {f"send {n}" for n in range(5)} and text_of(stored[1]) == "c" * 80
    async with stack.db() as conn:
        rows = await conn.fetch("SELECT id FROM popagent_thread_messages WHERE thread_id = $1 ORDER BY seq", session)
    assert [row["id"] for row in rows] == [m["id"] for m in stored], "the thread holds what the session shows"


@pytest.mark.timeout(90)
async def test_enqueue_runs_five_concurrent_sends_in_order_each_stream_saying_it_was_queued(stack: Stack) -> None:
    session, sends = await five_sends_over_a_running_turn(stack, "enqueue")
    assert {status for status, _ in sends} == {200}, sends
    assert [ending(chunks) for _, chunks in sends] == ["finish"] * 6
    for _, chunks in sends[:5]:
        queued = chunks[0]
        assert queued["type"] == "data-turnQueued" and queued["transient"] is True, chunks[:2]
        assert 1 <= queued["data"]["ahead"] <= 5
        assert chunks[1]["type"] == "start"
        assert chunks[1]["messageMetadata"]["turnId"] == queued["data"]["turnId"]
    stored = await stored_messages(stack, session)
    assert [m["role"] for m in stored] == ["user", "assistant"] * 6
    # They ran in the order they were queued.
    async with stack.db() as conn:
        rows = await conn.fetch(
            "SELECT id FROM popagent_turns WHERE session_id = $1 AND queued_at IS NOT NULL ORDER BY queued_at, id",
            session,
        )
    answer_of_turn = {chunks[1]["messageMetadata"]["turnId"]: chunks[1]["messageId"] for _, chunks in sends[:5]}
    assert [m["id"] for m in stored[3::2]] == [answer_of_turn[row["id"]] for row in rows]


@pytest.mark.timeout(60)
async def test_reject_refuses_five_concurrent_sends_and_keeps_only_the_running_turn(stack: Stack) -> None:
    session, sends = await five_sends_over_a_running_turn(stack, "reject")
    assert [status for status, _ in sends[:5]] == [409] * 5, sends
    assert ending(sends[5][1]) == "finish"
    assert [text_of(m) for m in await stored_messages(stack, session)] == ["first", "c" * 80]
