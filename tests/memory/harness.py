"""An in-process conversation over observational memory: the turn layer's memory steps, a real model
request (pydantic-ai on the lean model, over HTTP to a scripted server) and the thread's storage.

Each `turn()` does what a chat turn does to its thread: `ObservationalMemory.context()` for the
request's history, laid out as the runner lays it out (`lay_out`), the supervisor-like agent run on it, the user and assistant rows stored as
ThreadStore stores them, then `after_turn()`. Message times come from the caller, so temporal tests
control them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import httpx
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, UserPromptPart

from popagent_agent_runner.llm.model import LeanModels
from popagent_agent_runner.llm.stream import streaming_to
from popagent_agent_runner.memory.observational import QUERIES as MEMORY_QUERIES
from popagent_agent_runner.memory.observational.layout import TurnMemory, lay_out
from popagent_agent_runner.memory.observational.memory import ObservationalMemory
from popagent_agent_runner.memory.observational.store import MemorySettings, ObservationStore
from popagent_agent_runner.memory.observational.tokens import count_text
from popagent_agent_runner.memory.observational.windows import ContextWindows
from popagent_agent_runner.memory.threads import _content, _stored
from support.model_gateway import Body, ModelGateway
from support.stacks import MODEL

SMALL_MODEL = "fake/small-window"
OTHER_MODEL = "fake/other-chat"
INSTRUCTIONS = "You are popagent, a helpful assistant."
START = dt.datetime(2026, 11, 2, 9, 0, tzinfo=dt.UTC)

DEFAULTS = MemorySettings(
    enabled=True,
    observation_message_tokens=1000,
    reflection_observation_tokens=1000,
    raw_history_retention_messages=4,
    async_observation_enabled=False,
    observation_buffer_activation=0.5,
    observation_block_after=2.0,
    async_reflection_enabled=False,
    reflection_buffer_activation=0.5,
    reflection_block_after=2.0,
    idle_activation_seconds=0,
    activate_on_provider_change=False,
    shared_budget=False,
    previous_observation_max_tokens=500,
    temporal_markers=False,
    forward_attachments=False,
    retrieval_scope="thread",
    observer_instructions="",
    reflector_instructions="",
)


def settings(**changes: Any) -> MemorySettings:
    return dataclasses.replace(DEFAULTS, **changes)


@dataclass
class TurnRecord:
    memory: TurnMemory
    request: Body  # the chat request the model got
    context_s: float = 0.0  # observational memory's part of the turn before the model call
    first_text_s: float = 0.0  # turn start -> the model's first text delta (time to first token)
    # A background observation or reflection of the thread was running at the turn's start, and
    # still when its first text arrived.
    background_at_start: bool = False
    background_at_first_text: bool = False


class FirstText:
    """A turn sink that notes when the first text arrived (and whether `busy()` was true then)."""

    def __init__(self, busy: Callable[[], bool] = lambda: False) -> None:
        self.at: float | None = None
        self.busy = busy
        self.busy_then = False

    def text_delta(self, index: int, delta: str) -> None:
        if self.at is None:
            self.at = time.perf_counter()
            self.busy_then = self.busy()

    def thinking_delta(self, index: int, delta: str) -> None:
        pass


@dataclass
class Conversation:
    harness: Conversations
    thread_id: str
    model: str = MODEL
    clock: dt.datetime = START
    turns: list[TurnRecord] = field(default_factory=list[TurnRecord])

    async def turn(
        self,
        text: str,
        memory_settings: MemorySettings,
        *,
        at: dt.datetime | None = None,
        prompt: Any = None,
        turn_parts: str | None = None,
        probe: bool = False,
    ) -> TurnRecord:
        """One turn; `probe`: the same request on the thread as it is, nothing stored (no `after_turn`)."""
        if not probe:
            self.clock = at or self.clock + dt.timedelta(minutes=1)
        om = self.harness.memory

        def busy() -> bool:
            task = om.background(self.thread_id)
            return task is not None and not task.done()

        background_at_start = busy()
        started = time.perf_counter()
        memory = await om.context(
            self.thread_id,
            self.model,
            settings=memory_settings,
            fixed_tokens=count_text(INSTRUCTIONS),
            prompt_tokens=count_text(text) + 8,
            now=self.clock,
        )
        context_s = time.perf_counter() - started
        agent = self.harness.agent(self.model)
        before = len(self.harness.gateway.requests)
        first = FirstText(busy)
        layout = lay_out(
            memory.history, observations=memory.observations, turn_parts=turn_parts, prompt_marker=memory.prompt_marker
        )
        with streaming_to(first):
            result = await agent.run(
                prompt if prompt is not None else text, message_history=layout.history, instructions=layout.instructions
            )
        chat_requests = [b for b in self.harness.gateway.requests[before:] if _is_chat(b)]
        first_text_s = (first.at or time.perf_counter()) - started
        record = TurnRecord(memory, chat_requests[-1], context_s, first_text_s, background_at_start, first.busy_then)
        if probe:
            om.turn_ended(self.thread_id)
            return record
        await self.harness.store(self.thread_id, result.new_messages(), self.clock, text)
        await om.after_turn(self.thread_id, self.model, memory)
        self.turns.append(record)
        return record


def _is_chat(body: Body) -> bool:
    from support.memory_agents import is_observer, is_reflector

    return not is_observer(body) and not is_reflector(body)


@dataclass
class Conversations:
    pool: asyncpg.Pool
    gateway: ModelGateway
    models: LeanModels
    memory: ObservationalMemory
    _agents: dict[str, Agent[None, str]] = field(default_factory=dict[str, Agent[None, str]])

    @classmethod
    @contextlib.asynccontextmanager
    async def open(cls, pool: asyncpg.Pool, gateway: ModelGateway, api_key: str) -> AsyncIterator[Conversations]:
        async with httpx.AsyncClient() as http, LeanModels(gateway.url, api_key) as models:
            memory = ObservationalMemory(
                store=ObservationStore(pool, MEMORY_QUERIES),
                model_for=models.get,
                windows=ContextWindows(gateway.url, api_key, http),
            )
            try:
                yield cls(pool, gateway, models, memory)
            finally:
                await memory.aclose()

    def agent(self, model: str) -> Agent[None, str]:
        if model not in self._agents:
            self._agents[model] = Agent(self.models.get(model), instructions=INSTRUCTIONS)
        return self._agents[model]

    async def new(self, model: str = MODEL) -> Conversation:
        thread_id = f"om-{uuid.uuid4().hex[:12]}"
        await self.pool.execute(
            "INSERT INTO popagent_threads (id, resource_id) VALUES ($1, 'popagent-user')", thread_id
        )
        return Conversation(self, thread_id, model)

    async def store(self, thread_id: str, new: list[ModelMessage], at: dt.datetime, text: str) -> None:
        """The turn's user and assistant rows, as ThreadStore.commit_turn stores them."""
        first, rest = (new[0], new[1:]) if new and isinstance(new[0], ModelRequest) else (None, new)
        user_ui = {"id": f"u-{uuid.uuid4().hex[:10]}", "role": "user", "parts": [{"type": "text", "text": text}]}
        answer_ui = {"id": f"a-{uuid.uuid4().hex[:10]}", "role": "assistant", "parts": []}
        rows = [
            (user_ui["id"], "user", _content(user_ui, _stored([first] if first else [])), at),
            (answer_ui["id"], "assistant", _content(answer_ui, _stored(rest)), at + dt.timedelta(seconds=5)),
        ]
        await self.pool.executemany(
            "INSERT INTO popagent_thread_messages (thread_id, id, role, content, created_at)"
            " VALUES ($1, $2, $3, $4::jsonb, $5)",
            [(thread_id, *row) for row in rows],
        )

    async def originals(self, thread_id: str) -> list[tuple[str, str]]:
        rows = await self.pool.fetch(
            "SELECT role, content->'ui'->'parts'->0->>'text' AS text FROM popagent_thread_messages"
            " WHERE thread_id = $1 ORDER BY seq",
            thread_id,
        )
        return [(row["role"], row["text"]) for row in rows]


def user_prompt(request: Body) -> list[str]:
    return [str(m.get("content")) for m in request["messages"] if m.get("role") == "user"]


def request_tokens(request: Body) -> int:
    """The prompt tokens of a chat request as sent (every message's text, tools' schemas)."""
    import json

    total = 0
    for message in request["messages"]:
        content = message.get("content")
        total += 4 + count_text(content if isinstance(content, str) else json.dumps(content))
        if message.get("tool_calls"):
            total += count_text(json.dumps(message["tool_calls"]))
    return total


__all__ = ["ModelRequest", "UserPromptPart"]
