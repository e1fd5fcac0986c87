"""Helpers of the chat tests: sessions, one chat turn over HTTP, the SSE chunks, what was stored."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson

from popagent.agent_runner.v1 import agent_runner_pb2 as runner_pb
from popagent.agent_runner.v1 import agent_runner_pb2_grpc
from popagent.events.v1 import events_pb2
from popagent_agent_runner.memory.observational.layout import TURN_NOTE
from popagent_core import subjects
from support.sse import read_sse
from support.stacks import MODEL, Stack


def user_message(text: str, message_id: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "id": message_id or f"user-{uuid.uuid4().hex[:8]}",
        "role": "user",
        "parts": [{"type": "text", "text": text}],
        **extra,
    }


async def streamed_on_runner(
    stub: agent_runner_pb2_grpc.AgentRunnerServiceStub, session: str, text: str, events: list[runner_pb.TurnEvent]
) -> None:
    """One chat turn straight on an agent-runner's `Chat`, each event appended to `events` as it arrives
    (the tests watch the list while the turn streams)."""
    request = runner_pb.ChatRequest(
        session_id=session, message_json=orjson.dumps(user_message(text)).decode(), model=MODEL
    )
    async for batch in stub.Chat(request):
        events.extend(batch.events)


async def supervisor_asks_nothing(client: httpx.AsyncClient) -> None:
    """Empty the supervisor's tool approval policy. A fresh install's asks before a shell command or a
    secret fill (docs/approvals.md, Defaults); tests of what the tools do run them unasked, and
    tests/chat/test_approvals.py tests the gate with rules of its own."""
    emptied = await client.patch("/api/agents/popagent", json={"toolApproval": []})
    assert emptied.status_code == 200, emptied.text


async def reset_for_chat(stack: Stack) -> Stack:
    """A started stack as each chat test gets it: reset, and the supervisor asking nothing."""
    stack.reset()
    async with stack.client() as client:
        await supervisor_asks_nothing(client)
    return stack


async def new_session(client: httpx.AsyncClient) -> str:
    response = await client.post("/api/sessions", json={"title": "chat test"})
    assert response.status_code == 201, response.text
    return response.json()["id"]


async def chat(
    client: httpx.AsyncClient,
    session_id: str,
    message: dict[str, Any] | str,
    *,
    model: str | None = MODEL,
    expect_status: int = 200,
) -> list[Any]:
    """One turn: POST /api/chat and every chunk of the stream ([DONE] included)."""
    body: dict[str, Any] = {"id": session_id, "message": user_message(message) if isinstance(message, str) else message}
    if model is not None:
        body["model"] = model
    async with client.stream("POST", "/api/chat", json=body) as response:
        if response.status_code != expect_status:
            await response.aread()
            raise AssertionError(f"status {response.status_code}: {response.text}")
        if expect_status != 200:
            await response.aread()
            return [response.json()]
        assert response.headers["x-vercel-ai-ui-message-stream"] == "v1"
        return await read_sse(response)


async def new_workspace_session(client: httpx.AsyncClient, name: str, title: str) -> str:
    """The folder `name` under the workspace root registered as workspace `name`, and a new session in it: its id."""
    created = await client.post("/api/workspaces", json={"id": name, "name": name, "path": name})
    assert created.status_code == 201, created.text
    session = await client.post("/api/sessions", json={"title": title, "workspaceId": name})
    assert session.status_code == 201, session.text
    return session.json()["id"]


async def chat_in_a_new_session(stack: Stack, message: dict[str, Any] | str) -> tuple[str, list[Any]]:
    """One turn in a session made for it: the session's id and every chunk of the stream."""
    async with stack.client() as client:
        session = await new_session(client)
        return session, await chat(client, session, message)


@contextlib.asynccontextmanager
async def settings_changed(client: httpx.AsyncClient, section: str, **changes: object) -> AsyncIterator[None]:
    """The settings of /api/settings/<section> changed for the block, then restored (the stack is shared)."""
    path = f"/api/settings/{section}"
    before = (await client.get(path)).json()
    response = await client.patch(path, json=changes)
    assert response.status_code == 200, response.text
    try:
        yield
    finally:
        restore = {key: before[key] for key in changes}
        assert (await client.patch(path, json=restore)).status_code == 200


def runtime_settings(client: httpx.AsyncClient, **changes: object) -> contextlib.AbstractAsyncContextManager[None]:
    """Agent-runtime settings changed for the block, then restored."""
    return settings_changed(client, "agent-runtime", **changes)


def shape(chunks: list[Any]) -> list[Any]:
    """The chunk sequence with generated ids replaced by stable placeholders.

    Text part ids become `t1`, `t2`... in order of appearance, tool call ids `c1`, `c2`...,
    activity ids `a1`...; the message id, turn id and usage stay out (checked on their own).
    Adjacent text deltas of one part are joined: how a part's text is split into deltas
    depends on timing (the runner merges deltas that wait in one batch), its text does not.
    """
    names: dict[str, str] = {}

    def stable(kind: str, value: str) -> str:
        key = f"{kind}:{value}"
        if key not in names:
            names[key] = f"{kind}{sum(1 for k in names if k.startswith(kind + ':')) + 1}"
        return names[key]

    shaped: list[Any] = []
    for chunk in chunks:
        if not isinstance(chunk, dict):
            shaped.append(chunk)
            continue
        chunk = dict(chunk)
        kind = chunk["type"]
        if kind == "start":
            chunk = {"type": "start"}
        elif kind == "finish":
            chunk = {"type": "finish", "finishReason": chunk.get("finishReason")}
        elif kind.startswith("text-"):
            chunk["id"] = stable("t", chunk["id"])
        elif kind.startswith("tool-"):
            chunk["toolCallId"] = stable("c", chunk["toolCallId"])
        elif kind == "data-agentActivity":
            chunk = {"type": kind, "id": stable("a", chunk["id"]), "status": chunk["data"]["status"]}
        previous = shaped[-1] if shaped else None
        if isinstance(previous, dict) and kind == previous["type"] == "text-delta" and previous["id"] == chunk["id"]:
            previous["delta"] += chunk["delta"]
            continue
        shaped.append(chunk)
    return shaped


def text_step(text: str, part: str = "t1") -> list[Any]:
    """The shaped chunks of one model step that answers with text (its deltas joined by `shape`)."""
    return [
        {"type": "start-step"},
        {"type": "text-start", "id": part},
        {"type": "text-delta", "id": part, "delta": text},
        {"type": "text-end", "id": part},
        {"type": "finish-step"},
    ]


def tool_input(tool: str, arguments: dict[str, Any], call: str = "c1") -> list[Any]:
    """The shaped chunks that announce a tool call: its start, then its complete input."""
    return [
        {"type": "tool-input-start", "toolCallId": call, "toolName": tool},
        {"type": "tool-input-available", "toolCallId": call, "toolName": tool, "input": arguments},
    ]


def finished_stream(*steps: list[Any], reason: str = "stop") -> list[Any]:
    """A whole shaped stream that finishes: start, the steps' chunks in order, finish with the reason, [DONE]."""
    return [
        {"type": "start"},
        *(chunk for step in steps for chunk in step),
        {"type": "finish", "finishReason": reason},
        "[DONE]",
    ]


def of_type(chunks: list[Any], kind: str) -> list[dict[str, Any]]:
    return [c for c in chunks if isinstance(c, dict) and c["type"] == kind]


def text_of(chunks: list[Any]) -> str:
    return "".join(c["delta"] for c in chunks if isinstance(c, dict) and c["type"] == "text-delta")


async def thread_rows(stack: Stack, thread_id: str) -> list[tuple[str, str, dict[str, Any]]]:
    async with stack.db() as conn:
        rows = await conn.fetch(
            "SELECT id, role, content::text AS content FROM popagent_thread_messages WHERE thread_id = $1 ORDER BY seq",
            thread_id,
        )
    return [(row["id"], row["role"], orjson.loads(row["content"])) for row in rows]


async def turn_events(stack: Stack, session_id: str) -> list[events_pb2.TurnCompleted]:
    """The TurnCompleted facts the turns of a session put in the outbox, oldest first."""
    async with stack.db() as conn:
        rows = await conn.fetch(
            "SELECT payload FROM popagent_outbox WHERE subject = $1 ORDER BY seq", subjects.TURN_COMPLETED
        )
    events = [events_pb2.TurnCompleted.FromString(bytes(row["payload"])) for row in rows]
    return [event for event in events if event.session_id == session_id]


async def recorded_turn(stack: Stack, session_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The user and assistant UI messages a turn recorded, once in the thread and once in the
    session's messages (what reopening the session shows); asserts the two agree."""
    rows = await thread_rows(stack, session_id)
    assert [role for _, role, _ in rows] == ["user", "assistant"]
    async with stack.db() as conn:
        stored = await conn.fetchval("SELECT messages::text FROM popagent_sessions WHERE id = $1", session_id)
    assert isinstance(stored, str)
    listed = orjson.loads(stored)
    assert listed == [rows[0][2]["ui"], rows[1][2]["ui"]]
    return rows[0][2]["ui"], rows[1][2]["ui"]


_NOTE_START = TURN_NOTE.split("{text}", 1)[0]


def is_turn_note(message: dict[str, Any]) -> bool:
    """The turn's own note (recalled memories, a hook's added context), sent after the history."""
    return message.get("role") == "user" and str(message.get("content", "")).startswith(_NOTE_START)


def turn_note(request: dict[str, Any]) -> str:
    """The text of the request's turn note ('' when it has none)."""
    return "\n".join(str(m["content"]) for m in request["messages"] if is_turn_note(m))


def conversation_of(request: dict[str, Any]) -> list[tuple[str, Any]]:
    """(role, content) of the request's messages but its instructions and its turn note."""
    return [(m["role"], m["content"]) for m in request["messages"] if m["role"] != "system" and not is_turn_note(m)]
