"""The three-node run: chats through both gateways and a batch of tasks on a `support.cluster`,
while a NATS server, an agent-runner, a gateway and a tasks worker are killed and started again.
Shared by tests/scale/test_three_nodes.py (small) and bench/scale.py (larger, with figures).

A chat is a browser's: `POST /api/chat` through one gateway, reading the SSE stream and the id of
every chunk; when its connection breaks (its gateway is gone), it resumes through the other
gateway with `GET /api/chat/{session}/stream` and `Last-Event-ID`, as the AI SDK's `resume` does.
"""

from __future__ import annotations

import asyncio
import collections
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import httpx
import nats
import orjson
from nats.js.errors import NotFoundError

from popagent_core import subjects

MODEL = "fake/fake-chat"
# How long a client keeps trying to resume its stream (a 503 while the cluster heals is retried).
RESUME_WITHIN_S = 60.0
TERMINAL_TASK_STATUSES = ("completed", "failed", "dead-letter", "cancelled")


@dataclass
class Chat:
    session: str
    prompt: str
    gateways: list[str]  # the gateway it starts on first, then the ones it may resume through
    api_key: str
    chunks: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    last_id: str = ""
    done: bool = False
    resumed_through: list[str] = field(default_factory=list[str])
    # Seconds from a broken connection to the next chunk through another gateway.
    resume_gaps: list[float] = field(default_factory=list[float])
    status: int | None = None
    started_at: float = 0.0
    ended_at: float = 0.0
    first_text_at: float = 0.0
    chunk_times: list[float] = field(default_factory=list[float])
    errors: list[str] = field(default_factory=list[str])
    # A resume found the turn ended (204): the client reads the stored answer, as the AI SDK does.
    ended_unseen: bool = False

    @property
    def headers(self) -> dict[str, str]:
        return {"x-popagent-key": self.api_key}

    @property
    def text(self) -> str:
        return "".join(chunk.get("delta", "") for chunk in self.chunks if chunk["type"] == "text-delta")

    @property
    def terminal(self) -> str | None:
        ends = [chunk["type"] for chunk in self.chunks if chunk["type"] in ("finish", "error", "abort")]
        return ends[-1] if ends and self.done else None

    @property
    def streaming(self) -> bool:
        return any(chunk["type"] == "text-delta" for chunk in self.chunks)

    async def _read(self, response: httpx.Response) -> None:
        async for line in response.aiter_lines():
            if line.startswith("id: "):
                self.last_id = line.removeprefix("id: ")
            elif line == "data: [DONE]":
                self.done = True
            elif line.startswith("data: {"):
                self.chunks.append(orjson.loads(line.removeprefix("data: ")))
                now = time.monotonic()
                self.chunk_times.append(now)
                if not self.first_text_at and self.chunks[-1]["type"] == "text-delta":
                    self.first_text_at = now

    async def run(self, client: httpx.AsyncClient) -> None:
        self.started_at = time.monotonic()
        message = {"id": f"u-{uuid.uuid4().hex}", "role": "user", "parts": [{"type": "text", "text": self.prompt}]}
        body = {"id": self.session, "model": MODEL, "message": message}
        broken_at = 0.0
        try:
            async with client.stream(
                "POST", f"{self.gateways[0]}/api/chat", json=body, headers=self.headers
            ) as response:
                self.status = response.status_code
                if self.status == 200:
                    await self._read(response)
                else:
                    # Refused before the stream: the body says why (a 409 names the running turn).
                    self.errors.append(f"{self.status}: {(await response.aread()).decode(errors='replace')[:500]}")
        except httpx.HTTPError as exc:
            self.errors.append(f"{self.gateways[0]}: {type(exc).__name__}: {exc}")
            broken_at = time.monotonic()
        # Resume (through the next gateway, round the list) until the stream says it ended.
        attempt = 0
        give_up_at = time.monotonic() + RESUME_WITHIN_S
        while not self.done and self.status == 200 and time.monotonic() < give_up_at:
            attempt += 1
            gateway = self.gateways[attempt % len(self.gateways)]
            before = len(self.chunks)
            try:
                async with client.stream(
                    "GET",
                    f"{gateway}/api/chat/{self.session}/stream",
                    headers={**self.headers, "Last-Event-ID": self.last_id},
                ) as response:
                    if response.status_code == 204:
                        self.ended_unseen = True
                        break  # the turn ended meanwhile: the stored answer says how
                    response.raise_for_status()
                    self.resumed_through.append(gateway)
                    await self._read(response)
                if broken_at and len(self.chunks) > before:
                    self.resume_gaps.append(self.chunk_times[before] - broken_at)
                    broken_at = 0.0
            except httpx.HTTPError as exc:
                self.errors.append(f"{gateway}: {type(exc).__name__}: {exc}")
                broken_at = broken_at or time.monotonic()
                await asyncio.sleep(0.5)
        self.ended_at = time.monotonic()


async def stored_answer(client: httpx.AsyncClient, gateway: str, api_key: str, chat: Chat) -> list[str]:
    """The texts of the assistant messages stored after the chat's prompt."""
    loaded = await client.get(f"{gateway}/api/sessions/{chat.session}", headers={"x-popagent-key": api_key})
    assert loaded.status_code == 200, loaded.text
    messages = loaded.json()["messages"]
    prompts = [
        index
        for index, message in enumerate(messages)
        if message["role"] == "user" and message["parts"] == [{"type": "text", "text": chat.prompt}]
    ]
    assert len(prompts) == 1, (chat.prompt, messages)
    answers = []
    for message in messages[prompts[0] + 1 :]:
        if message["role"] != "assistant":
            break
        answers.append("".join(part.get("text", "") for part in message["parts"] if part["type"] == "text"))
    return answers


async def new_session(client: httpx.AsyncClient, gateway: str, api_key: str) -> str:
    created = await client.post(f"{gateway}/api/sessions", json={"title": "scale"}, headers={"x-popagent-key": api_key})
    assert created.status_code == 201, created.text
    return created.json()["id"]


async def create_task(client: httpx.AsyncClient, gateway: str, api_key: str, prompt: str, attempts: int) -> str:
    task = {"prompt": prompt, "workspaceId": "popagent", "model": MODEL, "maxAttempts": attempts}
    created = await client.post(f"{gateway}/api/tasks", json=task, headers={"x-popagent-key": api_key})
    assert created.status_code == 201, created.text
    return created.json()["id"]


async def running_turn_runners(database_url: str, sessions: Sequence[str]) -> dict[str, str]:
    """session -> the runner id (host:port) of its running chat turn."""
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(
            "SELECT session_id, runner_id FROM agent_runner.popagent_turns "
            "WHERE status = 'running' AND session_id = ANY($1::text[])",
            list(sessions),
        )
    finally:
        await conn.close()
    return {row["session_id"]: row["runner_id"] for row in rows}


@dataclass
class TaskOutcome:
    status: str
    attempts: int
    completed_turns: int  # the task's turn records that completed in agent-runner


async def task_outcomes(database_url: str, task_ids: Sequence[str]) -> dict[str, TaskOutcome]:
    conn = await asyncpg.connect(database_url)
    try:
        tasks = await conn.fetch(
            "SELECT id::text AS id, status, attempt_count FROM tasks.popagent_agent_tasks WHERE id = ANY($1::uuid[])",
            list(task_ids),
        )
        turns = await conn.fetch(
            "SELECT task_id, count(*) FILTER (WHERE status = 'completed') AS completed "
            "FROM agent_runner.popagent_turns WHERE task_id = ANY($1::text[]) GROUP BY task_id",
            list(task_ids),
        )
    finally:
        await conn.close()
    completed = {row["task_id"]: row["completed"] for row in turns}
    return {row["id"]: TaskOutcome(row["status"], row["attempt_count"], completed.get(row["id"], 0)) for row in tasks}


async def outbox_ids(database_url: str) -> dict[str, list[str]]:
    """schema -> the ids of every event its outbox holds (published or not)."""
    conn = await asyncpg.connect(database_url)
    try:
        schemas = await conn.fetch(
            "SELECT table_schema FROM information_schema.tables WHERE table_name = 'popagent_outbox'"
        )
        return {
            row["table_schema"]: [
                str(event["id"])
                for event in await conn.fetch(f'SELECT id FROM "{row["table_schema"]}".popagent_outbox')
            ]
            for row in schemas
        }
    finally:
        await conn.close()


async def stream_event_ids(nats_url: str, schemas: Sequence[str]) -> dict[str, collections.Counter[str]]:
    """schema -> how many times each outbox event id (`Nats-Msg-Id`) is stored in its service's
    stream (messages without one, the tasks service's core wake-ups, are not events)."""
    client = await nats.connect(nats_url.split(","))
    try:
        js = client.jetstream(timeout=5)
        found: dict[str, collections.Counter[str]] = {}
        for schema in schemas:
            stream = subjects.stream_name(schema)
            state = (await js.stream_info(stream)).state
            ids: collections.Counter[str] = collections.Counter()
            for sequence in range(max(state.first_seq, 1), state.last_seq + 1 if state.messages else 1):
                try:
                    message = await js.get_msg(stream, sequence)
                except NotFoundError:
                    continue
                event_id = (message.headers or {}).get("Nats-Msg-Id")
                if event_id:
                    ids[event_id] += 1
            found[schema] = ids
        return found
    finally:
        await client.close()


async def outbox_counts(database_url: str) -> dict[str, tuple[int, int]]:
    """schema -> (outbox rows, rows not yet published) of every service schema with an outbox."""
    conn = await asyncpg.connect(database_url)
    try:
        schemas = await conn.fetch(
            "SELECT table_schema FROM information_schema.tables WHERE table_name = 'popagent_outbox'"
        )
        counts = {}
        for row in schemas:
            schema = row["table_schema"]
            total, pending = await conn.fetchrow(
                f'SELECT count(*), count(*) FILTER (WHERE published_at IS NULL) FROM "{schema}".popagent_outbox'
            )
            counts[schema] = (total, pending)
    finally:
        await conn.close()
    return counts


async def task_story(database_url: str, task_id: str) -> str:
    """A task's progress and its turn records, in order: what a wrong outcome is read from."""
    conn = await asyncpg.connect(database_url)
    try:
        progress = await conn.fetch(
            "SELECT attempt, kind, message, created_at FROM tasks.popagent_agent_task_progress "
            "WHERE task_id = $1::uuid ORDER BY created_at, id",
            task_id,
        )
        turns = await conn.fetch(
            "SELECT id, status, runner_id, started_at, ended_at FROM agent_runner.popagent_turns "
            "WHERE task_id = $1 ORDER BY started_at",
            task_id,
        )
    finally:
        await conn.close()
    lines = [f"task {task_id}:"]
    lines += [f"  progress {p['created_at']:%H:%M:%S.%f} #{p['attempt']} {p['kind']}: {p['message']}" for p in progress]
    lines += [
        f"  turn {t['id']} {t['status']} on {t['runner_id']} {t['started_at']:%H:%M:%S.%f} -> {t['ended_at']}"
        for t in turns
    ]
    return "\n".join(lines)


async def session_turns(database_url: str, session_id: str) -> str:
    """A session's last turn records: what a refused chat is read from."""
    conn = await asyncpg.connect(database_url)
    try:
        turns = await conn.fetch(
            "SELECT id, status, runner_id, attempts, started_at, ended_at FROM agent_runner.popagent_turns "
            "WHERE session_id = $1 ORDER BY started_at DESC LIMIT 4",
            session_id,
        )
    finally:
        await conn.close()
    return "\n".join(
        f"    turn {t['id']} {t['status']} on {t['runner_id']} (attempts {t['attempts']}) "
        f"{t['started_at']:%H:%M:%S.%f} -> {t['ended_at']}"
        for t in turns
    )
