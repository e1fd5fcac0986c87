"""Observer and Reflector runs: in a turn that waits for them, or in the background between turns.

Background work runs between turns: its steps wait while a turn of this process is in flight (from
the memory's `context()` to its `after_turn()`), so that turn's time to first token does not share
the event loop with it, unless that turn is waiting for the work. A thread has at most one
background observation or reflection at a time, and in this process never two of its observations
or reflections at once; background work does not hold the thread's lock over its model call (a
turn's own observation or reflection would wait for it): its commit checks the cursor instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from contextvars import ContextVar
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models import Model, ModelRequestParameters
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.usage import RunUsage

from popagent_agent_runner.memory.observational.observer import MemoryAgents, tail
from popagent_agent_runner.memory.observational.policy import (
    background_reflection_floor,
    bounded_reflection,
    log_tokens,
    message_threshold,
    observation_batch,
)
from popagent_agent_runner.memory.observational.store import MemorySettings, ObservationStore

logger = logging.getLogger(__name__)

# Background work runs between turns: each of its steps waits for the process's turns in flight to
# end, at most this long; a turn is in flight from its `context()` to its `after_turn()` (or
# `turn_ended()`), at most TURN_LEASE_S (a turn that failed on the way never says it ended).
BACKGROUND_YIELD_S = 10.0
TURN_LEASE_S = 120.0

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


class TurnsInFlight:
    """This process's turns in flight, which background steps wait for."""

    def __init__(self) -> None:
        # Thread -> the loop time its turn's lease ends, and whether there are none.
        self._turns: dict[str, float] = {}
        self._no_turns = asyncio.Event()
        self._no_turns.set()
        # Threads whose background work a turn is waiting for (it waits for no turn), and the
        # events that wake a background step waiting between turns.
        self._awaited: set[str] = set()
        self._wake: dict[str, asyncio.Event] = {}

    def turn_began(self, thread_id: str) -> None:
        self._turns[thread_id] = asyncio.get_running_loop().time() + TURN_LEASE_S
        self._no_turns.clear()

    def turn_ended(self, thread_id: str) -> None:
        self._turns.pop(thread_id, None)
        if not self._in_flight():
            self._no_turns.set()

    def _in_flight(self) -> bool:
        now = asyncio.get_running_loop().time()
        self._turns = {thread: until for thread, until in self._turns.items() if until > now}
        return bool(self._turns)

    async def between_turns(self, thread_id: str) -> None:
        """A background step's wait for the turns in flight to end (their time to first token has the
        CPU to itself: this process's event loop is shared), at most BACKGROUND_YIELD_S."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + BACKGROUND_YIELD_S
        # Until no turn is in flight when this step resumes (another may have begun meanwhile).
        while self._in_flight() and thread_id not in self._awaited and loop.time() < deadline:
            wake = self._wake[thread_id] = asyncio.Event()
            waits = [asyncio.ensure_future(self._no_turns.wait()), asyncio.ensure_future(wake.wait())]
            try:
                await asyncio.wait(waits, timeout=deadline - loop.time(), return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiting in waits:
                    waiting.cancel()
                if self._wake.get(thread_id) is wake:
                    del self._wake[thread_id]
        if not self._in_flight():
            self._no_turns.set()

    @contextlib.contextmanager
    def awaited(self, thread_id: str) -> Iterator[None]:
        """A turn waits for the background work of `thread_id`: meanwhile that work waits for no turn."""
        self._awaited.add(thread_id)
        if (wake := self._wake.get(thread_id)) is not None:
            wake.set()
        try:
            yield
        finally:
            self._awaited.discard(thread_id)


class BackgroundWork:
    def __init__(
        self,
        *,
        store: ObservationStore,
        agents: MemoryAgents,
        model_for: Callable[[str], Model],
        turns: TurnsInFlight,
    ) -> None:
        self.store = store
        self.agents = agents
        self.model_for = model_for
        self.turns = turns
        # The background observation or reflection of each thread (at most one at a time).
        self._running: dict[str, asyncio.Task[None]] = {}
        # Per thread: observation and reflection never run twice at once in this process.
        self._locks: dict[str, asyncio.Lock] = {}
        # Usage of the Observer and Reflector calls.
        self.usage = RunUsage()
        # Per route, the model background work calls (`_BetweenTurnsModel`).
        self._background_models: dict[str, Model] = {}
        # Token counts of a prelude's read being stored, off the turn's way to its model call.
        self._storing: set[asyncio.Task[None]] = set()

    def _model(self, route: str, *, background: bool) -> Model:
        if not background:
            return self.model_for(route)
        model = self._background_models.get(route)
        if model is None:
            if len(self._background_models) > 64:
                self._background_models.clear()
            model = self._background_models[route] = _BetweenTurnsModel(self.model_for(route))
        return model

    def _lock(self, thread_id: str) -> asyncio.Lock:
        lock = self._locks.get(thread_id)
        if lock is None:
            if len(self._locks) > 1024:
                self._locks = {k: v for k, v in self._locks.items() if v.locked()}
            lock = self._locks[thread_id] = asyncio.Lock()
        return lock

    # -- observation ----------------------------------------------------------------

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
        async with contextlib.nullcontext() if buffered else self._lock(thread_id):
            while True:
                if buffered:
                    await self.turns.between_turns(thread_id)
                state = await self.store.state(thread_id)
                if not buffered and state.buffered_seq > state.observed_seq:
                    await self.store.activate_buffered(thread_id)
                    state = await self.store.state(thread_id)
                raw = await self.store.raw(thread_id, state.buffered_seq, stop_at_id)
                batch = observation_batch(raw, settings, force=force)
                if not batch:
                    return observed
                log = await self.store.log(thread_id, state.generation)
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
                    await self.turns.between_turns(thread_id)
                committed = await self.store.commit_observation(
                    thread_id, state, batch, content, route, active=not buffered
                )
                if not committed:
                    return observed
                observed += len(batch)
                if not force and not buffered:
                    # One batch per call unless forced: the rest stays raw for the next turn.
                    remaining = await self.store.raw(thread_id, batch[-1].seq, stop_at_id)
                    if sum(m.tokens for m in remaining) <= message_threshold(settings, log_tokens(log)):
                        break
                elif buffered:
                    break
        if not buffered and not settings.async_reflection_enabled:
            await self.reflect(thread_id, route, settings)
        return observed

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
        aside for the store's `activate_reflection` (the log the turns see does not change yet).

        A buffered reflection runs beside observations (see `observe`): whatever they add to the log
        meanwhile is not covered, and is copied after it."""
        async with contextlib.nullcontext() if buffered else self._lock(thread_id):
            if buffered:
                await self.turns.between_turns(thread_id)
            state = await self.store.state(thread_id)
            log = [e for e in await self.store.log(thread_id, state.generation) if e.active]
            limit = settings.reflection_observation_tokens if above_tokens is None else above_tokens
            if not log or log_tokens(log) <= limit:
                return False
            text = "\n".join(e.content for e in log if e.content)
            entries, usage = await self.agents.reflect(
                self._model(route, background=buffered), text, custom=settings.reflector_instructions
            )
            self.usage.incr(usage)
            content = bounded_reflection(entries, settings.reflection_observation_tokens)
            if buffered:
                await self.turns.between_turns(thread_id)
            return await self.store.commit_reflection(thread_id, state, log, content, route, buffered=buffered)

    # -- in the background -----------------------------------------------------------

    def start_buffering(self, thread_id: str, route: str, settings: MemorySettings) -> None:
        """Observe in the background, into buffered entries a later turn activates."""
        self._start(thread_id, self._buffer(thread_id, route, settings))

    def start_reflecting(self, thread_id: str, route: str, settings: MemorySettings) -> None:
        """Reflect in the background, into a buffered reflection a later turn activates."""
        self._start(thread_id, self._reflect_in_background(thread_id, route, settings))

    def running(self, thread_id: str) -> asyncio.Task[None] | None:
        return self._running.get(thread_id)

    def busy(self, thread_id: str) -> bool:
        running = self._running.get(thread_id)
        return running is not None and not running.done()

    async def wait(self, thread_id: str) -> bool:
        """Wait for the thread's background work, if any runs (its failure is its own); whether it ran."""
        task = self._running.get(thread_id)
        if task is None or task.done():
            return False
        with self.turns.awaited(thread_id), contextlib.suppress(Exception):
            await asyncio.shield(task)
        return True

    def store_counts_soon(self, thread_id: str, uncounted: Sequence[tuple[int, int]]) -> None:
        # Only a later read needs them (each count is stored once; until then it is counted again).
        async def store() -> None:
            try:
                await self.store.store_counts(thread_id, uncounted)
            except Exception as exc:
                logger.warning("message token counts not stored", extra={"error": str(exc)})

        task = asyncio.create_task(store(), name=f"observational-memory counts {thread_id}")
        self._storing.add(task)
        task.add_done_callback(self._storing.discard)

    def _start(self, thread_id: str, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work, name=f"observational-memory {thread_id}")
        self._running[thread_id] = task
        task.add_done_callback(lambda done: self._finished(thread_id, done))

    def _finished(self, thread_id: str, task: asyncio.Task[None]) -> None:
        if self._running.get(thread_id) is task:
            del self._running[thread_id]
        if not task.cancelled() and task.exception() is not None:
            logger.warning("background observation failed", extra={"error": str(task.exception())})

    async def _buffer(self, thread_id: str, route: str, settings: MemorySettings) -> None:
        _between_turns_gate.set(lambda: self.turns.between_turns(thread_id))
        await self.observe(thread_id, route, settings, buffered=True)

    async def _reflect_in_background(self, thread_id: str, route: str, settings: MemorySettings) -> None:
        # Started once the log passed reflection_buffer_activation x threshold, before it is due;
        # buffered until the log reaches the threshold (the memory's `context()` activates it).
        _between_turns_gate.set(lambda: self.turns.between_turns(thread_id))
        await self.reflect(
            thread_id, route, settings, above_tokens=background_reflection_floor(settings), buffered=True
        )

    async def aclose(self) -> None:
        if self._storing:
            await asyncio.wait(set(self._storing), timeout=2.0)
        tasks = [t for t in self._running.values() if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=2.0)
