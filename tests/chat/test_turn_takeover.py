"""A turn whose agent-runner is killed (docs/turns.md, Takeover): another runner goes on with it,
from its prompt when it had called no tool, else from its last stored step (tool results stored are
not redone, a call that was running is reported to the model as interrupted and never run again
unasked), and its client's stream goes on to the answer. The killed runner is a real process,
killed with SIGKILL."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from popagent_agent_runner.service import runner_name
from support.model_gateway import ToolCall, Turn
from support.stacks import MODEL, Stack
from support.waiting import eventually
from support.web_standins import Page

from .helpers import new_session, recorded_turn, user_message
from .runners import runner_process, session_on

ANSWER = "w" * 120


async def turn_record(stack: Stack, session: str) -> dict[str, Any]:
    async with stack.db() as conn:
        row = await conn.fetchrow(
            "SELECT id, status, runner_id, attempts, progress FROM popagent_turns WHERE session_id = $1", session
        )
    assert row is not None
    return dict(row)


@pytest.mark.timeout(120)
async def test_a_runner_killed_mid_model_call_loses_no_turn_its_client_sees_the_answer(
    stack: Stack, tmp_path: Path
) -> None:
    stack.models.push(Turn.say(ANSWER, chunk_size=4, chunk_delay_s=0.05), Turn.say(ANSWER, chunk_size=4))
    async with runner_process(stack, tmp_path) as (address, process), stack.client() as client:
        session = await session_on(client, [*stack.runner_workers, address], address)
        body = {"id": session, "model": MODEL, "message": user_message("keep going")}
        async with client.stream("POST", "/api/chat", json=body) as response:
            assert response.status_code == 200
            lines = response.aiter_lines()
            chunks: list[Any] = []
            async for line in lines:
                if line.startswith("data: "):
                    data = line.removeprefix("data: ")
                    chunks.append(data if data == "[DONE]" else orjson.loads(data))
                    if chunks[-1] != "[DONE]" and chunks[-1]["type"] == "text-delta" and len(chunks) > 5:
                        break
            assert (await turn_record(stack, session))["runner_id"] == runner_name(address)
            process.send_signal(signal.SIGKILL)
            async for line in lines:
                if line.startswith("data: "):
                    data = line.removeprefix("data: ")
                    chunks.append(data if data == "[DONE]" else orjson.loads(data))
    # The stream went on, through another runner, to the answer the runner that took it over gave.
    assert chunks[-1] == "[DONE]" and chunks[-2]["type"] == "finish", chunks[-3:]
    assert not [c for c in chunks[:-1] if c["type"] == "error"]
    starts = [c for c in chunks[:-1] if c["type"] == "start"]
    assert len(starts) == 2 and starts[0]["messageId"] == starts[1]["messageId"]
    record = await turn_record(stack, session)
    assert record["status"] == "completed" and record["attempts"] == 2
    assert record["runner_id"] in {runner_name(worker) for worker in stack.runner_workers}
    # Stored once, complete, as the message the client saw.
    _, assistant = await recorded_turn(stack, session)
    assert assistant["id"] == starts[0]["messageId"]
    assert "".join(p["text"] for p in assistant["parts"] if p["type"] == "text") == ANSWER
    assert "interrupted" not in assistant["metadata"]


async def chat_killing(
    stack: Stack, client: httpx.AsyncClient, session: str, process: asyncio.subprocess.Process, *, kill_when: Any
) -> list[Any]:
    """POST /api/chat on `session`; SIGKILL its runner once `kill_when(chunks so far)` holds; every chunk."""
    body = {"id": session, "model": MODEL, "message": user_message("go on")}
    chunks: list[Any] = []

    async def killer() -> None:
        await eventually(lambda: kill_when(chunks), within=60, interval=0.02, what="the moment to kill the runner")
        process.send_signal(signal.SIGKILL)

    killing = asyncio.create_task(killer())
    try:
        async with client.stream("POST", "/api/chat", json=body) as response:
            assert response.status_code == 200
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    data = line.removeprefix("data: ")
                    chunks.append(data if data == "[DONE]" else orjson.loads(data))
        assert killing.done() and not killing.cancelled(), "the runner was killed mid-turn"
    finally:
        killing.cancel()
    return chunks


def texts(chunks: list[Any]) -> list[str]:
    return [c["delta"] for c in chunks if isinstance(c, dict) and c["type"] == "text-delta"]


@pytest.mark.timeout(120)
async def test_a_runner_killed_mid_tool_call_the_turn_goes_on_and_the_call_is_reported_interrupted(
    stack: Stack, tmp_path: Path
) -> None:
    stack.pages.pages["/slow"] = Page(body=b"<html><body><p>slow</p></body></html>", delay_s=30)
    url = stack.pages.url("/slow")
    stack.models.push(
        Turn.call(ToolCall("researcher", {"brief": f"Read {url}"}, id="call-d")),
        Turn.call(ToolCall("webFetch", {"url": url}, id="call-f")),
        Turn.say("The page could not be read this time."),
    )
    async with runner_process(stack, tmp_path) as (address, process), stack.client() as client:
        session = await session_on(client, [*stack.runner_workers, address], address)

        async def fetching(_chunks: list[Any]) -> bool:
            return bool(stack.pages.requests)

        chunks = await chat_killing(stack, client, session, process, kill_when=fetching)
    assert chunks[-1] == "[DONE]" and chunks[-2]["type"] == "finish", chunks[-3:]
    assert "".join(texts(chunks)) == "The page could not be read this time."
    # The delegation that was running is an interrupted call for the model; nothing ran it again.
    [interrupted] = [c for c in chunks[:-1] if c["type"] == "tool-output-error"]
    assert interrupted["toolCallId"] == "call-d" and "interrupted" in interrupted["errorText"]
    assert [seen.path for seen in stack.pages.requests] == ["/slow"]
    assert len(stack.models.requests) == 3
    tool_message = stack.models.requests[2]["messages"][-1]
    assert tool_message["role"] == "tool" and tool_message["tool_call_id"] == "call-d"
    assert "interrupted" in tool_message["content"]
    record = await turn_record(stack, session)
    assert (record["status"], record["attempts"]) == ("completed", 2)
    _, assistant = await recorded_turn(stack, session)
    [tool_part] = [p for p in assistant["parts"] if p.get("toolCallId") == "call-d"]
    assert tool_part["state"] == "output-error"
    assert "".join(p["text"] for p in assistant["parts"] if p["type"] == "text") == (
        "The page could not be read this time."
    )


@pytest.mark.timeout(120)
async def test_a_runner_killed_after_a_tool_result_goes_on_from_it_without_running_the_tool_again(
    stack: Stack, tmp_path: Path
) -> None:
    stack.searxng.results = [{"url": "https://example.org/a", "title": "A", "content": "about a"}]
    stack.models.push(
        Turn.call(ToolCall("webSearch", {"query": "a"}, id="call-s")),
        Turn.say("x" * 120, chunk_size=4, chunk_delay_s=0.05),
        Turn.say("Found A.", chunk_size=4),
    )
    async with runner_process(stack, tmp_path) as (address, process), stack.client() as client:
        session = await session_on(client, [*stack.runner_workers, address], address)

        async def answering(chunks: list[Any]) -> bool:
            return len(texts(chunks)) >= 3

        chunks = await chat_killing(stack, client, session, process, kill_when=answering)
    assert chunks[-1] == "[DONE]" and chunks[-2]["type"] == "finish", chunks[-3:]
    # One search; the model's third call carries its stored result, and the prompt only once.
    assert len(stack.searxng.requests) == 1
    assert len(stack.models.requests) == 3
    first, resumed = stack.models.requests[0]["messages"], stack.models.requests[2]["messages"]
    assert resumed[: len(first)] == first
    assert [m["role"] for m in resumed[len(first) :]] == ["assistant", "tool"]
    assert "about a" in resumed[-1]["content"]
    record = await turn_record(stack, session)
    assert (record["status"], record["attempts"]) == ("completed", 2)
    _, assistant = await recorded_turn(stack, session)
    [search] = [p for p in assistant["parts"] if p.get("toolCallId") == "call-s"]
    assert search["state"] == "output-available"
    assert "".join(p["text"] for p in assistant["parts"] if p["type"] == "text") == "Found A."


@pytest.mark.timeout(60)
async def test_a_runner_whose_turn_was_taken_over_stores_nothing_of_it(stack: Stack) -> None:
    """Fencing: once the record is another runner's, the runner that had it stores no answer."""
    stack.models.push(Turn.say("w" * 120, chunk_size=4, chunk_delay_s=0.05))
    async with stack.client() as client:
        session = await new_session(client)
        body = {"id": session, "model": MODEL, "message": user_message("mine")}
        try:
            async with client.stream("POST", "/api/chat", json=body) as response:
                chunks: list[Any] = []
                async for line in response.aiter_lines():
                    if not line.startswith("data: "):
                        continue
                    data = line.removeprefix("data: ")
                    chunks.append(data if data == "[DONE]" else orjson.loads(data))
                    if len(texts(chunks)) == 2:
                        async with stack.db() as conn:
                            await conn.execute(
                                "UPDATE popagent_turns SET runner_id = 'elsewhere:1' WHERE session_id = $1", session
                            )
            assert chunks[-2]["type"] == "error" and "another took it over" in chunks[-2]["errorText"]
            _, assistant = await recorded_turn(stack, session)
            # Still the placeholder the prompt was stored with: nothing of this runner's answer.
            assert assistant["metadata"]["interrupted"] is True
            assert not [p for p in assistant["parts"] if p["type"] == "text"]
        finally:
            async with stack.db() as conn:
                await conn.execute(
                    "UPDATE popagent_turns SET status = 'interrupted', ended_at = now() WHERE session_id = $1", session
                )
