"""Observational memory's storage: every read and write of its rows, typed records out.

The settings row (`popagent_memory_settings`), a thread's cursor (`popagent_observation_state`), its
observation log (`popagent_observations`, one generation per reflection) and its raw messages with
their token counts (`popagent_thread_messages`, each counted once and stored). A commit that moves
the cursor checks, under the cursor's row lock, that no other writer moved it meanwhile.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter

from popagent_agent_runner.memory.observational.observer import RawMessage
from popagent_agent_runner.memory.observational.tokens import count_messages, count_text
from popagent_core.db import record_of, wrap_db_errors
from popagent_core.errors import ConfigurationError


@dataclass(frozen=True)
class MemorySettings:
    """One read of popagent_memory_settings (19 columns), used unchanged for the turn."""

    enabled: bool
    observation_message_tokens: int
    reflection_observation_tokens: int
    raw_history_retention_messages: int
    async_observation_enabled: bool
    observation_buffer_activation: float
    observation_block_after: float
    async_reflection_enabled: bool
    reflection_buffer_activation: float
    reflection_block_after: float
    idle_activation_seconds: int
    activate_on_provider_change: bool
    shared_budget: bool
    previous_observation_max_tokens: int
    temporal_markers: bool
    forward_attachments: bool
    retrieval_scope: str
    observer_instructions: str
    reflector_instructions: str

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> MemorySettings:
        return cls(**{name: row[name] for name in cls.__dataclass_fields__})


@dataclass(frozen=True)
class ThreadState:
    generation: int = 0
    observed_seq: int = 0
    buffered_seq: int = 0
    calibration: float = 1.0
    last_model: str | None = None
    last_turn_at: dt.datetime | None = None
    last_compaction_at: dt.datetime | None = None


@dataclass(frozen=True)
class LogEntry:
    seq: int
    kind: str
    content: str
    tokens: int
    first_message_seq: int
    last_message_seq: int
    message_tokens: int
    active: bool
    created_at: dt.datetime


@dataclass(frozen=True)
class ThreadView:
    """The thread as one read saw it: cursor, raw messages after it, the current log."""

    state: ThreadState
    raw: list[RawMessage]
    log: list[LogEntry]

    @property
    def pending(self) -> int:
        return sum(m.tokens for m in self.raw)


@dataclass(frozen=True)
class ThreadRead:
    """What the turn's prelude already read for the memory, in its one round trip (`turn_prelude`):
    the settings, the cursor, the current log and the raw messages after the cursor (all of the
    thread's when memory is disabled), before the asking message. `uncounted`: (seq, tokens) of
    raw messages counted now, whose counts are not stored yet."""

    settings: MemorySettings
    state: ThreadState
    raw: list[RawMessage]
    log: list[LogEntry]
    uncounted: list[tuple[int, int]] = dataclasses.field(default_factory=list[tuple[int, int]])


@dataclass(frozen=True)
class FinishedTurn:
    """A thread's cursor as a turn's end recorded it, with what background work is decided on."""

    generation: int
    buffered_seq: int
    # Tokens of the messages after the buffered cursor; None while one of them is uncounted.
    unbuffered_tokens: int | None
    # Tokens of the current log's active entries.
    active_log_tokens: int


class ParsedMessages:
    """Stored model messages parsed once per process, keyed by the stored JSON itself.

    Background observation reads the unobserved tail of a thread again after every turn once
    buffering has started, and validating each message with pydantic was most of what a long
    thread's turn cost the runner besides the model. Keyed by content rather than by message id,
    so a message rewritten in place (an edit, a rolled-back turn) can never be served stale.
    Each read gets its own message objects (their parts are shared): pydantic-ai stamps run
    metadata on history messages, which must not reach the next reader.
    """

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self._parsed: collections.OrderedDict[str, list[ModelMessage]] = collections.OrderedDict()
        self._chars = 0

    def parse(self, stored: str) -> list[ModelMessage]:
        parsed = self._parsed.get(stored)
        if parsed is None:
            parsed = ModelMessagesTypeAdapter.validate_json(stored)
            if len(stored) <= self.max_chars:
                self._parsed[stored] = parsed
                self._chars += len(stored)
                while self._chars > self.max_chars:
                    evicted, _ = self._parsed.popitem(last=False)
                    self._chars -= len(evicted)
        else:
            self._parsed.move_to_end(stored)
        return [copy.copy(message) for message in parsed]

    def __len__(self) -> int:
        return len(self._parsed)


# A few active threads' unobserved tails (the observation threshold bounds each one).
PARSED_MESSAGES_MAX_CHARS = 2_000_000


class ObservationStore:
    def __init__(self, pool: asyncpg.Pool, queries: Mapping[str, str]) -> None:
        self.pool = pool
        self.q = queries
        self.parsed = ParsedMessages(PARSED_MESSAGES_MAX_CHARS)

    # -- reading ----------------------------------------------------------------

    async def session_exists(self, session_id: str) -> bool:
        """Whether the session exists and is not being deleted."""
        with wrap_db_errors():
            return bool(await self.pool.fetchval(self.q["session_exists"], session_id))

    async def settings(self) -> MemorySettings:
        with wrap_db_errors():
            row = await self.pool.fetchrow(self.q["memory_settings"])
        if row is None:
            raise ConfigurationError("memory settings row is missing")
        return MemorySettings.from_row(row)

    async def state(self, thread_id: str) -> ThreadState:
        with wrap_db_errors():
            row = await self.pool.fetchrow(self.q["observation_state"], thread_id)
        return record_of(ThreadState, row) if row is not None else ThreadState()

    async def log(self, thread_id: str, generation: int) -> list[LogEntry]:
        with wrap_db_errors():
            rows = await self.pool.fetch(self.q["observation_log"], thread_id, generation)
        return [record_of(LogEntry, row) for row in rows]

    async def raw(self, thread_id: str, after_seq: int, stop_at_id: str = "") -> list[RawMessage]:
        """The thread's messages after `after_seq` (before message `stop_at_id`), each counted once."""
        with wrap_db_errors():
            rows = await self.pool.fetch(self.q["raw_messages"], thread_id, after_seq, stop_at_id)
        messages: list[RawMessage] = []
        uncounted: list[tuple[int, int]] = []
        for row in rows:
            parsed = self.parsed.parse(row["model"] or "[]")
            tokens = row["tokens"]
            if tokens is None:
                tokens = count_messages(parsed)
                uncounted.append((row["seq"], tokens))
            messages.append(RawMessage(row["seq"], row["id"], row["role"], row["created_at"], parsed, tokens))
        if uncounted:
            await self.store_counts(thread_id, uncounted)
        return messages

    async def read(self, thread_id: str, stop_at_id: str = "") -> ThreadView:
        """The cursor, the raw messages after it (before message `stop_at_id`) and the current log."""
        state = await self.state(thread_id)
        raw = await self.raw(thread_id, state.observed_seq, stop_at_id)
        return ThreadView(state, raw, await self.log(thread_id, state.generation))

    async def reflection_buffered(self, thread_id: str, generation: int) -> bool:
        """Whether a reflection is buffered for `generation` (and not activated yet)."""
        with wrap_db_errors():
            return await self.pool.fetchrow(self.q["buffered_reflection"], thread_id, generation) is not None

    # -- writing ----------------------------------------------------------------

    async def store_counts(self, thread_id: str, uncounted: Sequence[tuple[int, int]]) -> None:
        with wrap_db_errors():
            await self.pool.execute(
                self.q["store_message_tokens"],
                thread_id,
                [seq for seq, _ in uncounted],
                [tokens for _, tokens in uncounted],
            )

    async def commit_observation(
        self,
        thread_id: str,
        state: ThreadState,
        batch: Sequence[RawMessage],
        content: str,
        route: str,
        *,
        active: bool,
    ) -> bool:
        """Append the entry and move the cursor, unless another writer moved it meanwhile."""
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                await conn.execute(self.q["ensure_observation_state"], thread_id)
                current = await conn.fetchrow(self.q["lock_observation_state"], thread_id)
                if current["buffered_seq"] != state.buffered_seq or current["generation"] != state.generation:
                    return False
                await conn.execute(
                    self.q["insert_observation"],
                    thread_id,
                    state.generation,
                    "observation",
                    content,
                    count_text(content),
                    batch[0].seq,
                    batch[-1].seq,
                    sum(m.tokens for m in batch),
                    active,
                    route,
                )
                last = batch[-1].seq
                await conn.execute(self.q["advance_cursor"], thread_id, last if active else 0, last)
        return True

    async def activate_buffered(self, thread_id: str) -> None:
        """Buffered entries join the context (no model call): the cursor moves past them."""
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                current = await conn.fetchrow(self.q["lock_observation_state"], thread_id)
                if current is None or current["buffered_seq"] <= current["observed_seq"]:
                    return
                await conn.execute(
                    self.q["activate_buffered"], thread_id, current["generation"], current["buffered_seq"]
                )
                await conn.execute(self.q["advance_cursor"], thread_id, current["buffered_seq"], 0)

    async def commit_reflection(
        self,
        thread_id: str,
        state: ThreadState,
        log: Sequence[LogEntry],
        content: str,
        route: str,
        *,
        buffered: bool,
    ) -> bool:
        """The reflection of the active `log` as generation `state.generation + 1`, unless another
        writer started a generation meanwhile: the log from now on (the previous generation stays
        stored), or, `buffered`, kept aside for `activate_reflection` (replacing one buffered earlier)."""
        generation = state.generation + 1
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                current = await conn.fetchrow(self.q["lock_observation_state"], thread_id)
                if current is None or current["generation"] != state.generation:
                    return False
                # A reflection buffered earlier (and not activated) is superseded by this one.
                await conn.execute(self.q["drop_buffered_reflections"], thread_id, generation)
                await conn.execute(
                    self.q["insert_observation"],
                    thread_id,
                    generation,
                    "reflection",
                    content,
                    count_text(content),
                    min(e.first_message_seq for e in log),
                    max(e.last_message_seq for e in log),
                    sum(e.message_tokens for e in log),
                    not buffered,
                    route,
                )
                if not buffered:
                    covered = max(e.last_message_seq for e in log)
                    await conn.execute(
                        self.q["copy_uncovered_entries"], thread_id, state.generation, generation, covered
                    )
                    await conn.execute(self.q["carry_buffered"], thread_id, state.generation, generation)
                    await conn.execute(self.q["start_generation"], thread_id, generation)
        return True

    async def activate_reflection(self, thread_id: str, generation: int) -> bool:
        """The buffered reflection of `generation` becomes the log (no model call): a new generation of
        the reflection, then copies of the entries it does not cover (observed while it ran), then the
        buffered observations. The previous generation stays stored as it was."""
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                current = await conn.fetchrow(self.q["lock_observation_state"], thread_id)
                if current is None or current["generation"] != generation:
                    return False
                reflection = await conn.fetchrow(self.q["buffered_reflection"], thread_id, generation + 1)
                if reflection is None:
                    return False
                await conn.execute(self.q["activate_entry"], thread_id, reflection["seq"])
                await conn.execute(
                    self.q["copy_uncovered_entries"],
                    thread_id,
                    generation,
                    generation + 1,
                    reflection["last_message_seq"],
                )
                await conn.execute(self.q["carry_buffered"], thread_id, generation, generation + 1)
                await conn.execute(self.q["start_generation"], thread_id, generation + 1)
        return True

    async def finish_turn(
        self, thread_id: str, route: str, calibration: float | None, based_on: float | None
    ) -> FinishedTurn:
        """Record the turn's model and end, and `calibration` if the thread's factor still is
        `based_on` (None: left as it is), in one round trip that sums what background work is
        decided on in SQL instead of reading the thread's messages back."""
        with wrap_db_errors():
            row = await self.pool.fetchrow(self.q["finish_turn"], thread_id, route, calibration, based_on)
        return record_of(FinishedTurn, row)
