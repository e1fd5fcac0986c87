"""The real AI SDK client resumes a running turn, as `useChat({ resume: true })` does on mount, with
ai 5, 6 and 7 (tests/ai_sdk/resume-client.mjs): a fresh Chat's `resumeStream()` GETs
/api/chat/{sessionId}/stream, which replays the running turn from its first chunk and follows it
live to its end; with no running turn the route answers 204 and the chat stays empty."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson
import psutil
import pytest

from support.ai_sdk_client import run_ai_sdk_resume
from support.model_gateway import Turn
from support.stacks import API_KEY, MODEL, Stack
from support.waiting import eventually

from .helpers import new_session, recorded_turn, user_message

SLOW = {"chunk_size": 4, "chunk_delay_s": 0.05}  # 40 chunks of "w" * 160: about 2 s
ANSWER = "w" * 160
# The answer pauses after its first chunks until the resuming client is connected: a node process
# starting on a loaded machine may take longer than the whole answer.
PAUSE_AFTER_CHUNKS = 2
VERSIONS = [pytest.param("ai5", id="ai5"), pytest.param("ai", id="ai6"), pytest.param("ai7", id="ai7")]


async def started_turn(client: httpx.AsyncClient, session: str, text: str) -> tuple[httpx.Response, dict[str, Any]]:
    """POST /api/chat left open once its first text delta arrived: the response and its first chunk."""
    request = client.build_request(
        "POST", "/api/chat", json={"id": session, "model": MODEL, "message": user_message(text)}
    )
    response = await client.send(request, stream=True)
    assert response.status_code == 200, await response.aread()
    buffer = b""
    async for data in response.aiter_raw():
        buffer += data
        if b'"text-delta"' in buffer:
            break
    first_event = buffer.split(b"\n\n", 1)[0]
    return response, orjson.loads(first_event.split(b"data: ", 1)[1])


def client_connected(url: str) -> bool:
    """Whether a process this test started (the node client) holds a connection to the gateway at `url`."""
    port = int(url.rsplit(":", 1)[1])
    for child in psutil.Process().children(recursive=True):
        try:
            connections = child.net_connections(kind="tcp")
        except psutil.Error:
            continue
        if any(c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED for c in connections):
            return True
    return False


def text_of(message: dict[str, Any]) -> str:
    return "".join(part["text"] for part in message["parts"] if part["type"] == "text")


@pytest.mark.timeout(90)
@pytest.mark.parametrize("package", VERSIONS)
async def test_the_ai_sdk_client_resumes_a_running_turn_to_its_whole_answer(stack: Stack, package: str) -> None:
    resume = asyncio.Event()
    stack.models.push(Turn.say(ANSWER, **SLOW, pause_after_chunks=PAUSE_AFTER_CHUNKS, resume=resume))
    try:
        async with stack.client() as client:
            session = await new_session(client)
            response, first = await started_turn(client, session, "keep going")
            await response.aclose()  # the page goes away mid-answer; the turn runs on
            async with stack.db() as conn:
                status = await conn.fetchval("SELECT status FROM popagent_turns WHERE session_id = $1", session)
            assert status == "running"

            resuming = asyncio.create_task(run_ai_sdk_resume(package, stack.url, API_KEY, session))
            await eventually(
                lambda: resuming.done() or client_connected(stack.url), within=60, what="the resuming client to connect"
            )
            resume.set()
            resumed = await resuming
    finally:
        resume.set()

    assert resumed["errors"] == []
    assert resumed["status"] == "ready"
    assert resumed["requests"] == [{"method": "GET", "url": f"{stack.url}/api/chat/{session}/stream", "status": 200}]
    [message] = resumed["messages"]
    assert message["role"] == "assistant"
    assert text_of(message) == ANSWER
    assert [part["state"] for part in message["parts"] if part["type"] == "text"] == ["done"]
    assert message["metadata"]["turnId"] == first["messageMetadata"]["turnId"]

    _, stored = await recorded_turn(stack, session)
    assert text_of(stored) == ANSWER
    assert message["id"] == stored["id"]


@pytest.mark.parametrize("package", VERSIONS)
async def test_resuming_a_session_without_a_running_turn_leaves_the_chat_empty_and_ready(
    stack: Stack, package: str
) -> None:
    async with stack.client() as client:
        session = await new_session(client)
        resumed = await run_ai_sdk_resume(package, stack.url, API_KEY, session)
    assert resumed == {
        "status": "ready",
        "errors": [],
        "messages": [],
        "requests": [{"method": "GET", "url": f"{stack.url}/api/chat/{session}/stream", "status": 204}],
    }
