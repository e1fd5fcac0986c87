"""What a model sends a tool, and what a tool answers, can never break the turn's record.

Through the gateway on the real chat stack: a 10 MiB argument used to run, then kill the
stream (past gRPC's 8 MiB message) and leave a session that every GET answered 429; a NUL in
an argument (or in a result) used to run, then lose the turn's end (PostgreSQL's jsonb refuses
`\\u0000`). Each is now a tool error the model reads, or a result made storable, and the
session opens afterwards.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import orjson

from chat.helpers import chat, new_session, new_workspace_session, of_type, recorded_turn, text_of
from support.model_gateway import ToolCall, Turn
from support.stacks import Stack

MIB = 1024 * 1024
READ = "mastra_workspace_read_file"
WRITE = "mastra_workspace_write_file"
RUN = "mastra_workspace_execute_command"


async def workspace_session(stack: Stack, client: httpx.AsyncClient, files: dict[str, str]) -> tuple[str, Path]:
    name = f"bounds-{uuid.uuid4().hex[:8]}"
    folder = stack.workspace_root / name
    folder.mkdir()
    for relative, content in files.items():
        (folder / relative).write_text(content)
    return await new_workspace_session(client, name, "tool bounds"), folder


def tool_results(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


async def opened(client: httpx.AsyncClient, session: str) -> dict[str, Any]:
    response = await client.get(f"/api/sessions/{session}")
    assert response.status_code == 200, response.text[:500]
    # Well within what one gRPC answer carries.
    assert len(response.content) < 8 * MIB
    return response.json()


def tool_parts(message: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {part["toolCallId"]: part for part in message["parts"] if part["type"].startswith("tool-")}


async def test_a_huge_argument_is_refused_before_anything_sees_it(stack: Stack) -> None:
    async with stack.client() as client:
        client.timeout = httpx.Timeout(180)
        session, repo = await workspace_session(stack, client, {})
        stack.models.push(
            Turn.call(ToolCall(WRITE, {"path": "big.txt", "content": "x" * (10 * MIB)}, id="w1")),
            Turn.say("It was too large."),
        )
        chunks = await chat(client, session, "write a big file")
        [error] = of_type(chunks, "tool-output-error")
        assert error["toolCallId"] == "w1"
        assert "arguments are larger than 256 KiB (10240 KiB)" in error["errorText"], error
        assert "It did not run" in error["errorText"]
        assert not (repo / "big.txt").exists()
        assert of_type(chunks, "finish") and text_of(chunks) == "It was too large."
        # What the UI shows of the call is a note, not the 10 MiB.
        [shown] = of_type(chunks, "tool-input-available")
        assert shown["input"] == {"omitted": "10240 KiB of arguments, refused unread"}
        # The model read the refusal, and its history carries the note in place of the arguments.
        _, second = stack.models.requests
        assert "larger than 256 KiB" in tool_results(second)[0]
        assert len(json.dumps(second)) < MIB

        user, assistant = await recorded_turn(stack, session)
        assert tool_parts(assistant)["w1"]["input"] == shown["input"]
        stored = await opened(client, session)
        assert [m["id"] for m in stored["messages"]] == [user["id"], assistant["id"]]
        assert tool_parts(stored["messages"][1])["w1"]["state"] == "output-error"


async def test_a_nul_in_an_argument_is_refused_and_the_turn_is_recorded(stack: Stack) -> None:
    async with stack.client() as client:
        session, repo = await workspace_session(stack, client, {})
        stack.models.push(
            Turn.call(ToolCall(WRITE, {"path": "nul.txt", "content": "a\x00b"}, id="w1")),
            Turn.call(ToolCall(WRITE, {"pa\x00th": "nul.txt", "content": "ab"}, id="w2")),
            Turn.say("Done."),
        )
        chunks = await chat(client, session, "write a NUL")
        errors = {e["toolCallId"]: e["errorText"] for e in of_type(chunks, "tool-output-error")}
        assert set(errors) == {"w1", "w2"}, errors
        assert all("hold a NUL character or a lone surrogate" in text for text in errors.values()), errors
        assert not (repo / "nul.txt").exists()

        # The turn's end is stored: its text, and each call with its NUL shown as U+FFFD.
        _, assistant = await recorded_turn(stack, session)
        assert [p["text"] for p in assistant["parts"] if p["type"] == "text"] == ["Done."]
        parts = tool_parts(assistant)
        assert parts["w1"]["input"] == {"path": "nul.txt", "content": "a\ufffdb"}
        assert parts["w2"]["input"] == {"pa\ufffdth": "nul.txt", "content": "ab"}
        assert (await opened(client, session))["messages"][1]["id"] == assistant["id"]


async def test_results_are_stored_without_nul_and_cut_to_size(stack: Stack) -> None:
    # The binary sniff reads the first 8 KiB: a NUL past them comes back as text.
    late_nul = "a" * 9000 + "\x00" + "b\n"
    # 250 KiB of quotes: twice that as JSON, past the 384 KiB a result may hold.
    quotes = ('"' * 99 + "\n") * 2560
    async with stack.client() as client:
        session, _ = await workspace_session(stack, client, {"late.txt": late_nul, "quotes.txt": quotes})
        stack.models.push(
            Turn.call(ToolCall(READ, {"path": "late.txt"}, id="r1")),
            Turn.call(ToolCall(RUN, {"command": "printf 'x\\000y'"}, id="x1")),
            Turn.call(ToolCall(READ, {"path": "quotes.txt"}, id="r2")),
            Turn.say("Read."),
        )
        chunks = await chat(client, session, "read them")
        assert not of_type(chunks, "tool-output-error")
        outputs = {o["toolCallId"]: o["output"] for o in of_type(chunks, "tool-output-available")}
        assert "a\ufffdb" in outputs["r1"]["content"] and "\x00" not in outputs["r1"]["content"]
        assert outputs["x1"]["output"] == "x\ufffdy", outputs["x1"]
        cut = outputs["r2"]
        assert isinstance(cut, str) and cut.endswith("only its first 384 KiB are kept]"), cut[-200:]
        assert len(cut.encode()) < 385 * 1024
        # The model read the cut result too.
        assert "[truncated by popagent" in tool_results(stack.models.requests[-1])[-1]

        _, assistant = await recorded_turn(stack, session)
        parts = tool_parts(assistant)
        assert parts["x1"]["output"]["output"] == "x\ufffdy"
        assert parts["r2"]["output"] == cut
        assert (await opened(client, session))["messages"][1]["id"] == assistant["id"]


async def test_a_session_stored_past_what_one_read_carries_still_opens(stack: Stack) -> None:
    """A session stored before the bounds (or grown past a read by many bounded calls) opens with
    its largest contents replaced by a note; the stored row is left as it is."""
    async with stack.client() as client:
        session = await new_session(client)
        messages: list[dict[str, Any]] = [
            {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]},
            {
                "id": "a1",
                "role": "assistant",
                "parts": [
                    {
                        "type": "tool-mastra_workspace_write_file",
                        "toolCallId": "w1",
                        "state": "output-available",
                        "input": {"content": "x" * (5 * MIB)},
                        "output": "y" * (5 * MIB),
                    },
                    {"type": "text", "text": "All done."},
                ],
            },
        ]
        stored = orjson.dumps(messages).decode()
        async with stack.db() as conn:
            await conn.execute(
                "UPDATE popagent_sessions SET messages = $2::jsonb, message_count = 2 WHERE id = $1", session, stored
            )
        read = await opened(client, session)
        [_, assistant] = read["messages"]
        [tool, text] = assistant["parts"]
        assert text == {"type": "text", "text": "All done."}
        assert tool["state"] == "output-available"
        # The largest content goes first; the smaller one fits once it is gone.
        elided = [value for value in (tool["input"], tool["output"]) if "not shown" in json.dumps(value)]
        assert len(elided) == 1, tool.keys()
        async with stack.db() as conn:
            # The stored row is as it was.
            length = await conn.fetchval("SELECT length(messages::text) FROM popagent_sessions WHERE id = $1", session)
        assert isinstance(length, int) and length > 10 * MIB
