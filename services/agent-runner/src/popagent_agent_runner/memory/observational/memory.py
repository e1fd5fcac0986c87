"""Observational memory of a chat thread: what the next request carries, and keeping it bounded.

A turn's history is `[observations][recent raw messages]` instead of the whole thread:

1. `context()` before the model call reads `popagent_memory_settings` (a change applies on this turn),
   the thread's cursor and the raw messages after it (their token counts counted once and stored).
2. When the unobserved raw history exceeds the message threshold (`observation_message_tokens`; with
   `shared_budget`, that plus whatever of `reflection_observation_tokens` the log does not use), the
   Observer turns its oldest messages into observations, all but the newest
   `raw_history_retention_messages`, cut where a user message starts. Without async observation the
   turn waits for it; with it, the work was buffered in the background after an earlier turn (from
   `observation_buffer_activation` x threshold on) and is only activated here (no model call): at
   the threshold, after `idle_activation_seconds` without a turn, or when the model changed
   (`activate_on_provider_change`). A turn waits only when the unobserved history reached
   `observation_block_after` x threshold. Background work runs between turns: its steps wait while
   a turn of this process is in flight (from `context()` to `after_turn()`), so that turn's time to
   first token does not share the event loop with it, unless that turn is waiting for the work.
3. When the log exceeds `reflection_observation_tokens`, the Reflector condenses it into a new
   generation (the previous one stays stored). With async reflection, the Reflector runs in the
   background once the log passed `reflection_buffer_activation` x threshold and its result is
   buffered; it is activated (no model call) when the log reaches the threshold, together with
   copies of the entries observed while it ran. A turn waits for it only at
   `reflection_block_after` x threshold (and reflects then if nothing was buffered).
   `previous_observation_max_tokens` bounds how much of the log the Observer sees.
4. The context-window guard: with the model's window from the catalog, the request (instructions,
   observations, raw messages, prompt, an output reserve, scaled by the provider's calibration)
   never exceeds it: first a forced observation, then, as a last resort, the oldest raw messages are
   left out behind a marker.

The raw messages stay in PostgreSQL untouched. The observations block is rendered from stored entries
only, so it is byte-identical between turns until the log changes.

`lay_out()` orders the request for the longest byte-stable prefix (a provider's prompt cache stops at
the first byte that differs from the previous request): the agent's own instructions, then the
observations block (both system messages), then the raw messages, and only after them what changes
from turn to turn — the prompt's gap marker and the turn's parts (recalled memories, a hook's added
context) — then the prompt. A turn's request therefore begins with everything the previous one sent
but its own trailing parts, until an observation changes the block.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import asyncpg
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    UserPromptPart,
)
from pydantic_ai.models import Model, ModelRequestParameters
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.usage import RunUsage

from popagent_agent_runner.memory.observational.observer import (
    Entry,
    MemoryAgents,
    RawMessage,
    render,
    tail,
)
from popagent_agent_runner.memory.observational.tokens import PART_OVERHEAD, Calibration, count_messages, count_text
from popagent_agent_runner.memory.observational.windows import ContextWindows
from popagent_core.db import wrap_db_errors
from popagent_core.errors import ConfigurationError

logger = logging.getLogger(__name__)

# What the model keeps free of a window for its answer (at most a quarter of the window).
OUTPUT_RESERVE_TOKENS = 8192
# One Observer call reads at most this much of the raw history; more is observed in several calls.
MAX_BATCH_TOKENS = 40_000
# Gap markers between messages at least this far apart (temporal_markers).
TEMPORAL_GAP = dt.timedelta(minutes=10)
# Background work runs between turns: each of its steps waits for the process's turns in flight to
# end, at most this long; a turn is in flight from its `context()` to its `after_turn()` (or
# `turn_ended()`), at most TURN_LEASE_S (a turn that failed on the way never says it ended).
BACKGROUND_YIELD_S = 10.0
TURN_LEASE_S = 120.0

PREAMBLE = (
    "The observations below are your memory of the earlier part of this conversation (the messages "
    "themselves are no longer shown). Prefer the most recent observation when two disagree; the newest "
    "messages after this block take priority over it. Do not mention that you have a memory."
)
DROPPED_MARKER = "[{n} earlier messages of this conversation are left out here to fit the model's context window.]"


# Set in a background observation's or reflection's task: its wait for the turns in flight.
_between_turns_gate: ContextVar[Callable[[], Awaitable[None]] | None] = ContextVar("between_turns_gate", default=None)


class _BetweenTurnsModel(WrapperModel):
    """The Observer's and Reflector's model in background work: its request goes out, and its answer
    is taken up (pydantic-ai's output validation), between turns."""

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        gate = _between_turns_gate.get()
        if gate is not None:
            await gate()
        response = await super().request(messages, model_settings, model_request_parameters)
        if gate is not None:
            await gate()
        return response


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

    def message_threshold(self, log_tokens: int) -> int:
        if not self.shared_budget:
            return self.observation_message_tokens
        # A shared budget: what the log does not use of the reflection budget goes to raw messages.
        total = self.observation_message_tokens + self.reflection_observation_tokens
        return max(total - log_tokens, self.observation_message_tokens)

    @property
    def buffering(self) -> bool:
        return self.async_observation_enabled and not self.shared_budget

    @property
    def reflection_buffering(self) -> bool:
        return self.async_reflection_enabled and not self.shared_budget


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
class _View:
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
class TurnMemory:
    """What one request carries of the thread, and how it came to be."""

    # The raw messages sent (with their gap markers, or the guard's marker); the observations block
    # goes with the instructions (`lay_out`).
    history: list[ModelMessage]
    # The observations block as sent ('' when there is none) and its tokens.
    observations: str
    observation_tokens: int
    # Raw messages sent (rows) and their tokens.
    raw_messages: int
    raw_tokens: int
    # The whole request as counted (fixed + observations + raw + prompt), before calibration.
    request_tokens: int
    # A gap marker for the prompt itself (temporal_markers), for the turn's instructions.
    prompt_marker: str | None = None
    observed: bool = False  # an observation ran (or was activated) for this request
    waited: bool = False  # the turn waited for observation or reflection work
    # The log's reflection for this request: '' none, 'activated' a buffered one (no model call),
    # 'waited' the background one the turn waited for, 'reflected' the Reflector ran in the turn.
    reflection: str = ""
    dropped: int = 0  # raw messages the guard left out
    window: int | None = None
    settings: MemorySettings | None = None
    # The thread's calibration factor the request was counted with (`after_turn` updates it from there).
    calibration: float = 1.0


def _gap(delta: dt.timedelta) -> str:
    minutes = int(delta.total_seconds() // 60)
    days, rest = divmod(minutes, 24 * 60)
    hours, minutes = divmod(rest, 60)
    parts = [f"{days} day{'s' if days != 1 else ''}"] if days else []
    if hours:
        parts.append(f"{hours} hour{'s' if hours != 1 else ''}")
    if minutes and not days:
        parts.append(f"{minutes} minute{'s' if minutes != 1 else ''}")
    return " ".join(parts)


def temporal_marker(previous: dt.datetime, current: dt.datetime) -> str | None:
    if current - previous < TEMPORAL_GAP:
        return None
    return f"<system-reminder>{_gap(current - previous)} later — {current:%Y-%m-%d %H:%M} UTC</system-reminder>"


def observations_block(log: str) -> str:
    return f"{PREAMBLE}\n\n<observations>\n{log}\n</observations>" if log else ""


TURN_NOTE = "<system-reminder>A note from popagent for this turn, not from the user:\n\n{text}\n</system-reminder>"


@dataclass(frozen=True)
class RequestLayout:
    """A run's message history and its run-level instructions, in prompt-cache order."""

    history: list[ModelMessage]
    instructions: str | None


def lay_out(
    history: Sequence[ModelMessage],
    *,
    observations: str = "",
    turn_parts: str | None = None,
    prompt_marker: str | None = None,
) -> RequestLayout:
    """`[agent's instructions][observations][history][gap marker][turn parts]` + the prompt the run adds.

    The observations block is a run-level instruction, so it follows the agent's own (stable)
    instructions among the leading system messages. The marker and the turn's parts are user-role
    requests after the history (not instructions, which precede it): pydantic-ai sends each part as
    a message of its own, the marker just before the prompt as `_assemble` renders it once the
    prompt is history, and neither is stored with the turn (they come before the run's new messages).
    A user-role note rather than a mid-conversation system message because OpenAI-compatible routers
    that translate to Anthropic hoist every system message into the system prompt, ahead of the history.
    """
    trailing: list[ModelMessage] = []
    if prompt_marker:
        trailing.append(ModelRequest(parts=[UserPromptPart(content=prompt_marker)]))
    if turn_parts:
        trailing.append(ModelRequest(parts=[UserPromptPart(content=TURN_NOTE.format(text=turn_parts))]))
    return RequestLayout([*history, *trailing], observations or None)


class ObservationalMemory:
    def __init__(
        self,
        pool: asyncpg.Pool,
        queries: Mapping[str, str],
        model_for: Callable[[str], Model],
        windows: ContextWindows | None,
        *,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self.pool = pool
        self.q = queries
        self.model_for = model_for
        self.windows = windows
        self.clock = clock
        self.agents = MemoryAgents()
        # The background observation or reflection of each thread (at most one at a time).
        self._background: dict[str, asyncio.Task[None]] = {}
        # Per thread: observation and reflection never run twice at once in this process.
        self._locks: dict[str, asyncio.Lock] = {}
        # Usage of the Observer and Reflector calls (the bench reads it).
        self.usage = RunUsage()
        # Turns in flight (thread -> the loop time their lease ends) and whether there are none.
        self._turns: dict[str, float] = {}
        self._no_turns = asyncio.Event()
        self._no_turns.set()
        # Per route, the model background work calls (`_BetweenTurnsModel`).
        self._background_models: dict[str, Model] = {}
        # Threads whose background work a turn is waiting for (it waits for no turn), and the
        # events that wake a background step waiting between turns.
        self._awaited: set[str] = set()
        self._wake: dict[str, asyncio.Event] = {}
        # Token counts of a prelude's read being stored, off the turn's way to its model call.
        self._storing: set[asyncio.Task[None]] = set()

    # -- turns in flight: background work waits for them -----------------------------

    def turn_began(self, thread_id: str) -> None:
        self._turns[thread_id] = asyncio.get_running_loop().time() + TURN_LEASE_S
        self._no_turns.clear()

    def turn_ended(self, thread_id: str) -> None:
        self._turns.pop(thread_id, None)
        if not self._turns_in_flight():
            self._no_turns.set()

    def _turns_in_flight(self) -> bool:
        now = asyncio.get_running_loop().time()
        self._turns = {thread: until for thread, until in self._turns.items() if until > now}
        return bool(self._turns)

    def _model(self, route: str, *, background: bool) -> Model:
        if not background:
            return self.model_for(route)
        model = self._background_models.get(route)
        if model is None:
            if len(self._background_models) > 64:
                self._background_models.clear()
            model = self._background_models[route] = _BetweenTurnsModel(self.model_for(route))
        return model

    async def _between_turns(self, thread_id: str) -> None:
        """A background step's wait for the turns in flight to end (their time to first token has the
        CPU to itself: this process's event loop is shared), at most BACKGROUND_YIELD_S."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + BACKGROUND_YIELD_S
        # Until no turn is in flight when this step resumes (another may have begun meanwhile).
        while self._turns_in_flight() and thread_id not in self._awaited and loop.time() < deadline:
            wake = self._wake[thread_id] = asyncio.Event()
            waits = [asyncio.ensure_future(self._no_turns.wait()), asyncio.ensure_future(wake.wait())]
            try:
                await asyncio.wait(waits, timeout=deadline - loop.time(), return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiting in waits:
                    waiting.cancel()
                if self._wake.get(thread_id) is wake:
                    del self._wake[thread_id]
        if not self._turns_in_flight():
            self._no_turns.set()

    # -- reading ----------------------------------------------------------------

    async def settings(self) -> MemorySettings:
        with wrap_db_errors():
            row = await self.pool.fetchrow(self.q["memory_settings"])
        if row is None:
            raise ConfigurationError("memory settings row is missing")
        return MemorySettings.from_row(row)

    async def state(self, thread_id: str) -> ThreadState:
        with wrap_db_errors():
            row = await self.pool.fetchrow(self.q["observation_state"], thread_id)
        return ThreadState(**dict(row)) if row is not None else ThreadState()

    async def log(self, thread_id: str, generation: int) -> list[LogEntry]:
        with wrap_db_errors():
            rows = await self.pool.fetch(self.q["observation_log"], thread_id, generation)
        return [LogEntry(**{k: row[k] for k in LogEntry.__dataclass_fields__}) for row in rows]

    async def raw(self, thread_id: str, after_seq: int, stop_at_id: str = "") -> list[RawMessage]:
        """The thread's messages after `after_seq` (before message `stop_at_id`), each counted once."""
        with wrap_db_errors():
            rows = await self.pool.fetch(self.q["raw_messages"], thread_id, after_seq, stop_at_id)
        messages: list[RawMessage] = []
        uncounted: list[tuple[int, int]] = []
        for row in rows:
            parsed = ModelMessagesTypeAdapter.validate_json(row["model"] or "[]")
            tokens = row["tokens"]
            if tokens is None:
                tokens = count_messages(parsed)
                uncounted.append((row["seq"], tokens))
            messages.append(RawMessage(row["seq"], row["id"], row["role"], row["created_at"], parsed, tokens))
        if uncounted:
            await self._store_counts(thread_id, uncounted)
        return messages

    async def _store_counts(self, thread_id: str, uncounted: Sequence[tuple[int, int]]) -> None:
        with wrap_db_errors():
            await self.pool.execute(
                self.q["store_message_tokens"],
                thread_id,
                [seq for seq, _ in uncounted],
                [tokens for _, tokens in uncounted],
            )

    def _store_counts_soon(self, thread_id: str, uncounted: Sequence[tuple[int, int]]) -> None:
        # Only a later read needs them (each count is stored once; until then it is counted again).
        async def store() -> None:
            try:
                await self._store_counts(thread_id, uncounted)
            except Exception as exc:
                logger.warning("message token counts not stored", extra={"error": str(exc)})

        task = asyncio.create_task(store(), name=f"observational-memory counts {thread_id}")
        self._storing.add(task)
        task.add_done_callback(self._storing.discard)

    # -- one request's context ---------------------------------------------------

    async def context(
        self,
        thread_id: str,
        route: str,
        *,
        stop_at_id: str = "",
        fixed_tokens: int = 0,
        prompt_tokens: int = 0,
        settings: MemorySettings | None = None,
        now: dt.datetime | None = None,
        model_calls: bool = True,
        read: ThreadRead | None = None,
    ) -> TurnMemory:
        """The history the next request of `thread_id` carries, on model `route`.

        `model_calls=False` (after the Observer failed): activation, assembly and the guard only.
        `read`: the prelude's read of the thread (before message `stop_at_id`), used instead of reading it again.
        """
        self.turn_began(thread_id)
        if read is not None:
            settings = read.settings
            if read.uncounted:
                self._store_counts_soon(thread_id, read.uncounted)
        settings = settings or await self.settings()
        now = now or self.clock()
        window = await self.windows.window(route) if self.windows is not None else None
        observed = waited = False
        reflection = ""
        if not settings.enabled:
            raw = read.raw if read is not None else await self.raw(thread_id, 0, stop_at_id)
            view = _View(ThreadState(), raw, [])
            memory = self._assemble(view, settings, fixed_tokens, prompt_tokens, now)
            calibration = read.state.calibration if read is not None else None
        else:
            view = (
                _View(read.state, read.raw, read.log) if read is not None else await self._read(thread_id, stop_at_id)
            )
            threshold = settings.message_threshold(_tokens(view.log))
            if settings.buffering and any(not e.active for e in view.log):
                state = view.state
                idle = (
                    settings.idle_activation_seconds > 0
                    and state.last_turn_at is not None
                    and (now - state.last_turn_at).total_seconds() >= settings.idle_activation_seconds
                )
                changed = settings.activate_on_provider_change and state.last_model not in (None, route)
                if view.pending >= threshold or idle or changed:
                    await self._activate(thread_id, state)
                    observed = True
            if settings.buffering and view.pending >= threshold * settings.observation_block_after:
                waited = await self._wait_background(thread_id)
            if observed or waited:
                view = await self._read(thread_id, stop_at_id)
                threshold = settings.message_threshold(_tokens(view.log))
            blocking = not settings.buffering or view.pending >= threshold * settings.observation_block_after
            if view.pending > threshold and blocking and model_calls:
                await self.observe(thread_id, route, settings, stop_at_id=stop_at_id)
                observed = waited = True
                view = await self._read(thread_id, stop_at_id)
            log_tokens = _tokens([e for e in view.log if e.active])
            if settings.reflection_buffering and log_tokens > settings.reflection_observation_tokens:
                reflection = await self._reflection_due(
                    thread_id, route, settings, view.state, log_tokens, model_calls=model_calls
                )
                waited = waited or reflection in ("waited", "reflected")
                if reflection:
                    view = await self._read(thread_id, stop_at_id)
            elif model_calls and log_tokens > settings.reflection_observation_tokens:
                if await self.reflect(thread_id, route, settings):
                    reflection = "reflected"
                waited = True
                view = await self._read(thread_id, stop_at_id)
            memory = self._assemble(view, settings, fixed_tokens, prompt_tokens, now)
            over = window is not None and self._over(memory, window, view.state)
            if over and memory.raw_messages > 0 and model_calls:
                # The guard's first resort: observe now, whatever the thresholds say.
                try:
                    await self.observe(thread_id, route, settings, stop_at_id=stop_at_id, force=True)
                    observed = waited = True
                except Exception as exc:
                    logger.warning("forced observation failed", extra={"error": str(exc)})
                view = await self._read(thread_id, stop_at_id)
                memory = self._assemble(view, settings, fixed_tokens, prompt_tokens, now)
            calibration = view.state.calibration
        if window is not None and self._over(memory, window, view.state):
            memory = self._drop_oldest(memory, window, view.state)
        if calibration is None:
            calibration = (await self.state(thread_id)).calibration
        return dataclasses.replace(
            memory,
            observed=observed,
            waited=waited,
            reflection=reflection,
            window=window,
            settings=settings,
            calibration=calibration,
        )

    async def _read(self, thread_id: str, stop_at_id: str) -> _View:
        state = await self.state(thread_id)
        raw = await self.raw(thread_id, state.observed_seq, stop_at_id)
        return _View(state, raw, await self.log(thread_id, state.generation))

    def _budget(self, window: int) -> int:
        return window - min(OUTPUT_RESERVE_TOKENS, window // 4)

    def _over(self, memory: TurnMemory, window: int, state: ThreadState) -> bool:
        return Calibration(state.calibration).provider_tokens(memory.request_tokens) > self._budget(window)

    def _drop_oldest(self, memory: TurnMemory, window: int, state: ThreadState) -> TurnMemory:
        """The last resort: the oldest raw messages left out (whole turns), a marker in their place."""
        calibration = Calibration(state.calibration)
        body = list(memory.history)
        dropped = 0
        total = memory.request_tokens
        marker_tokens = count_text(DROPPED_MARKER) + 10
        while body and calibration.provider_tokens(total + marker_tokens) > self._budget(window):
            message = body.pop(0)
            total -= count_messages([message])
            dropped += 1
            # Never start on a tool return or a response: cut where a user prompt starts.
            while body and not _starts_turn(body[0]):
                total -= count_messages([body.pop(0)])
                dropped += 1
        marker = ModelRequest(parts=[UserPromptPart(content=DROPPED_MARKER.format(n=dropped))])
        kept = [marker, *body]
        return dataclasses.replace(
            memory,
            history=kept,
            raw_tokens=count_messages(body),
            request_tokens=total + marker_tokens,
            dropped=dropped,
        )

    def _assemble(
        self,
        view: _View,
        settings: MemorySettings,
        fixed_tokens: int,
        prompt_tokens: int,
        now: dt.datetime,
    ) -> TurnMemory:
        raw = view.raw
        text = "\n".join(e.content for e in view.log if e.active and e.content)
        block = observations_block(text)
        history: list[ModelMessage] = []
        # From each message's stored count, not by tokenizing the history again: that made every
        # turn's set-up (before its first token) grow with the length of the thread.
        raw_tokens = 0
        previous: dt.datetime | None = None
        for message in raw:
            parts = message.messages
            raw_tokens += message.tokens
            if settings.temporal_markers and previous is not None and message.role == "user":
                marker = temporal_marker(previous, message.created_at)
                if marker and parts and isinstance(parts[0], ModelRequest):
                    first = parts[0]
                    parts = [
                        dataclasses.replace(first, parts=[UserPromptPart(content=marker), *first.parts]),
                        *parts[1:],
                    ]
                    raw_tokens += PART_OVERHEAD + count_text(marker)
            history.extend(parts)
            previous = message.created_at
        prompt_marker = None
        if settings.temporal_markers and previous is not None:
            prompt_marker = temporal_marker(previous, now)
        block_tokens = count_text(block) + 7 if block else 0
        return TurnMemory(
            history=history,
            observations=block,
            observation_tokens=block_tokens,
            raw_messages=len(raw),
            raw_tokens=raw_tokens,
            request_tokens=fixed_tokens + block_tokens + raw_tokens + prompt_tokens,
            prompt_marker=prompt_marker,
        )

    # -- observation ----------------------------------------------------------------

    def _lock(self, thread_id: str) -> asyncio.Lock:
        lock = self._locks.get(thread_id)
        if lock is None:
            if len(self._locks) > 1024:
                self._locks = {k: v for k, v in self._locks.items() if v.locked()}
            lock = self._locks[thread_id] = asyncio.Lock()
        return lock

    @staticmethod
    def _batch(raw: Sequence[RawMessage], settings: MemorySettings, *, force: bool) -> list[RawMessage]:
        """The oldest messages to observe: all but the newest `raw_history_retention_messages`
        (none kept when forced), ending before a user message, at most `MAX_BATCH_TOKENS`."""
        keep = 0 if force else settings.raw_history_retention_messages
        end = max(0, len(raw) - keep)
        # The rest must start where a turn starts.
        while 0 < end < len(raw) and raw[end].role != "user":
            end -= 1
        batch: list[RawMessage] = []
        tokens = 0
        for message in raw[:end]:
            if batch and tokens + message.tokens > MAX_BATCH_TOKENS and message.role == "user":
                break
            batch.append(message)
            tokens += message.tokens
        return batch

    async def observe(
        self,
        thread_id: str,
        route: str,
        settings: MemorySettings,
        *,
        stop_at_id: str = "",
        force: bool = False,
        buffered: bool = False,
    ) -> int:
        """Observe the oldest unobserved messages now (into the active log, or as buffered entries);
        the number of messages observed. Buffered entries are activated first, unless buffering."""
        observed = 0
        # Background work does not hold the thread's lock over its model call (a turn's own
        # observation or reflection would wait for it); its commit checks the cursor instead.
        async with contextlib.nullcontext() if buffered else self._lock(thread_id):
            while True:
                if buffered:
                    await self._between_turns(thread_id)
                state = await self.state(thread_id)
                if not buffered and state.buffered_seq > state.observed_seq:
                    await self._activate(thread_id, state)
                    state = await self.state(thread_id)
                raw = await self.raw(thread_id, state.buffered_seq, stop_at_id)
                batch = self._batch(raw, settings, force=force)
                if not batch:
                    return observed
                log = await self.log(thread_id, state.generation)
                previous = tail(
                    "\n".join(e.content for e in log if e.content), settings.previous_observation_max_tokens
                )
                content, usage = await self.agents.observe(
                    self._model(route, background=buffered),
                    batch,
                    previous,
                    custom=settings.observer_instructions,
                    forward_attachments=settings.forward_attachments,
                )
                self.usage.incr(usage)
                if buffered:
                    await self._between_turns(thread_id)
                committed = await self._commit_observation(thread_id, state, batch, content, route, active=not buffered)
                if not committed:
                    return observed
                observed += len(batch)
                if not force and not buffered:
                    # One batch per call unless forced: the rest stays raw for the next turn.
                    remaining = await self.raw(thread_id, batch[-1].seq, stop_at_id)
                    if sum(m.tokens for m in remaining) <= settings.message_threshold(_tokens(log)):
                        break
                elif buffered:
                    break
        if not buffered and not settings.async_reflection_enabled:
            await self.reflect(thread_id, route, settings)
        return observed

    async def _commit_observation(
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

    async def _activate(self, thread_id: str, state: ThreadState) -> None:
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

    # -- reflection ------------------------------------------------------------------

    async def reflect(
        self,
        thread_id: str,
        route: str,
        settings: MemorySettings,
        *,
        above_tokens: int | None = None,
        buffered: bool = False,
    ) -> bool:
        """Condense the active log, if it is over `above_tokens` (default: the reflection threshold),
        into a new generation (the previous one stays stored) — or, `buffered`, into a reflection kept
        aside for `_activate_reflection` (the log the turns see does not change yet).

        A buffered reflection runs beside observations (see `observe`): whatever they add to the log
        meanwhile is not covered, and is copied after it."""
        async with contextlib.nullcontext() if buffered else self._lock(thread_id):
            if buffered:
                await self._between_turns(thread_id)
            state = await self.state(thread_id)
            log = [e for e in await self.log(thread_id, state.generation) if e.active]
            limit = settings.reflection_observation_tokens if above_tokens is None else above_tokens
            if not log or _tokens(log) <= limit:
                return False
            text = "\n".join(e.content for e in log if e.content)
            entries, usage = await self.agents.reflect(
                self._model(route, background=buffered), text, custom=settings.reflector_instructions
            )
            self.usage.incr(usage)
            content = _bounded(entries, settings.reflection_observation_tokens)
            generation = state.generation + 1
            if buffered:
                await self._between_turns(thread_id)
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

    async def _reflection_due(
        self,
        thread_id: str,
        route: str,
        settings: MemorySettings,
        state: ThreadState,
        log_tokens: int,
        *,
        model_calls: bool,
    ) -> str:
        """Async reflection once the log passed its threshold: `TurnMemory.reflection`.

        A reflection buffered in the background is activated (no model call). Without one, below
        `reflection_block_after` x threshold the turn goes on with the log as it is while one is
        buffered in the background; at it, the turn waits for the background work, then activates
        what it buffered, or reflects now.
        """
        if await self._activate_reflection(thread_id, state.generation):
            return "activated"
        blocking = log_tokens >= settings.reflection_observation_tokens * settings.reflection_block_after
        if not blocking:
            running = self._background.get(thread_id)
            if model_calls and (running is None or running.done()):
                self._start(thread_id, self._reflect_in_background(thread_id, route, settings))
            return ""
        if await self._wait_background(thread_id) and await self._activate_reflection(thread_id, state.generation):
            return "waited"
        if model_calls and await self.reflect(thread_id, route, settings):
            return "reflected"
        return ""

    async def _activate_reflection(self, thread_id: str, generation: int) -> bool:
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

    # -- after a turn: record it, buffer in the background ---------------------------

    async def after_turn(
        self,
        thread_id: str,
        route: str,
        memory: TurnMemory | None,
        *,
        reported_prompt_tokens: int | None = None,
    ) -> None:
        """Record the turn (model, time, calibration) and start background work the settings ask for.

        One round trip on the usual path: the thresholds are decided on counts summed in SQL (the
        turn's commit stored its messages' counts), not on the thread's messages read back.
        """
        self.turn_ended(thread_id)
        factor = based_on = None
        if memory is not None and reported_prompt_tokens:
            based_on = memory.calibration
            factor = Calibration(based_on).observe(reported_prompt_tokens, memory.request_tokens).factor
        with wrap_db_errors():
            finished = await self.pool.fetchrow(self.q["finish_turn"], thread_id, route, factor, based_on)
        settings = memory.settings if memory is not None and memory.settings is not None else None
        if settings is None or not settings.enabled:
            return
        running = self._background.get(thread_id)
        if running is not None and not running.done():
            return
        generation = finished["generation"]
        if settings.buffering:
            unbuffered = finished["unbuffered_tokens"]
            if unbuffered is None:  # a message not counted yet (stored by an older build, or by a failed turn)
                unbuffered = sum(m.tokens for m in await self.raw(thread_id, finished["buffered_seq"]))
            start_at = settings.message_threshold(0) * settings.observation_buffer_activation
            if unbuffered >= start_at:
                self._start(thread_id, self._buffer(thread_id, route, settings))
                return
        reflect_at = settings.reflection_observation_tokens * settings.reflection_buffer_activation
        if settings.reflection_buffering and finished["active_log_tokens"] > reflect_at:
            with wrap_db_errors():
                ready = await self.pool.fetchrow(self.q["buffered_reflection"], thread_id, generation + 1)
            if ready is None:
                self._start(thread_id, self._reflect_in_background(thread_id, route, settings))

    def _start(self, thread_id: str, work: Any) -> None:
        task = asyncio.create_task(work, name=f"observational-memory {thread_id}")
        self._background[thread_id] = task
        task.add_done_callback(lambda done: self._finished(thread_id, done))

    def _finished(self, thread_id: str, task: asyncio.Task[None]) -> None:
        if self._background.get(thread_id) is task:
            del self._background[thread_id]
        if not task.cancelled() and task.exception() is not None:
            logger.warning("background observation failed", extra={"error": str(task.exception())})

    async def _buffer(self, thread_id: str, route: str, settings: MemorySettings) -> None:
        _between_turns_gate.set(lambda: self._between_turns(thread_id))
        await self.observe(thread_id, route, settings, buffered=True)

    async def _reflect_in_background(self, thread_id: str, route: str, settings: MemorySettings) -> None:
        # Started once the log passed reflection_buffer_activation x threshold, before it is due;
        # buffered until the log reaches the threshold (`_reflection_due`).
        above = int(settings.reflection_observation_tokens * settings.reflection_buffer_activation)
        _between_turns_gate.set(lambda: self._between_turns(thread_id))
        await self.reflect(thread_id, route, settings, above_tokens=above, buffered=True)

    def background(self, thread_id: str) -> asyncio.Task[None] | None:
        return self._background.get(thread_id)

    async def _wait_background(self, thread_id: str) -> bool:
        task = self._background.get(thread_id)
        if task is None or task.done():
            return False
        # The turn waits for the work, so the work waits for no turn.
        self._awaited.add(thread_id)
        if (wake := self._wake.get(thread_id)) is not None:
            wake.set()
        try:
            with contextlib.suppress(Exception):
                await asyncio.shield(task)
        finally:
            self._awaited.discard(thread_id)
        return True

    async def aclose(self) -> None:
        if self._storing:
            await asyncio.wait(set(self._storing), timeout=2.0)
        tasks = [t for t in self._background.values() if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=2.0)


def _tokens(log: Sequence[LogEntry]) -> int:
    return sum(e.tokens for e in log)


def _starts_turn(message: ModelMessage) -> bool:
    return isinstance(message, ModelRequest) and any(isinstance(p, UserPromptPart) for p in message.parts)


PRIORITY_ORDER = ("🟢", "🟡", "✅", "🔴")


def _bounded(entries: Sequence[Entry], limit: int) -> str:
    """The reflected log within `limit` tokens: low-priority lines go first, then medium, oldest first."""
    kept = list(entries)
    content = render(kept)
    for marker in PRIORITY_ORDER:
        while count_text(content) >= limit and any(f"* {marker} " in e.line for e in kept):
            index = next(i for i, e in enumerate(kept) if f"* {marker} " in e.line)
            kept.pop(index)
            content = render(kept)
    return content
