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

Here the turn's side of it: `context()` before the model call and `after_turn()` after it, on
the store (`store.py`), the thresholds (`policy.py`), the Observer and Reflector runs
(`background.py`) and the request's layout (`layout.py`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
from collections.abc import Callable

from pydantic_ai.models import Model

from popagent_agent_runner.memory.observational.background import BackgroundWork, TurnsInFlight
from popagent_agent_runner.memory.observational.layout import TurnMemory, assemble, drop_oldest
from popagent_agent_runner.memory.observational.observer import MemoryAgents
from popagent_agent_runner.memory.observational.policy import (
    activation_due,
    background_reflection_starts,
    buffering_starts,
    buffers_observations,
    buffers_reflections,
    log_tokens,
    message_threshold,
    observation_blocks,
    over_window,
    reflection_blocks,
    reflection_due,
)
from popagent_agent_runner.memory.observational.store import (
    MemorySettings,
    ObservationStore,
    ThreadRead,
    ThreadState,
    ThreadView,
)
from popagent_agent_runner.memory.observational.tokens import Calibration
from popagent_agent_runner.memory.observational.windows import ContextWindows

logger = logging.getLogger(__name__)


class ObservationalMemory:
    """A chat turn's observational memory: what its request carries of the thread, and the work
    its end starts."""

    def __init__(
        self,
        *,
        store: ObservationStore,
        model_for: Callable[[str], Model],
        windows: ContextWindows | None,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self.store = store
        self.windows = windows
        self.clock = clock
        self.agents = MemoryAgents()
        self.turns = TurnsInFlight()
        self.work = BackgroundWork(store=store, agents=self.agents, model_for=model_for, turns=self.turns)

    def turn_ended(self, thread_id: str) -> None:
        """A turn that ends without `after_turn()` (it failed): background work stops waiting for it."""
        self.turns.turn_ended(thread_id)

    def background(self, thread_id: str) -> asyncio.Task[None] | None:
        """The thread's background observation or reflection, while it runs."""
        return self.work.running(thread_id)

    async def aclose(self) -> None:
        await self.work.aclose()

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
        self.turns.turn_began(thread_id)
        if read is not None:
            settings = read.settings
            if read.uncounted:
                self.work.store_counts_soon(thread_id, read.uncounted)
        settings = settings or await self.store.settings()
        now = now or self.clock()
        window = await self.windows.window(route) if self.windows is not None else None
        observed = waited = False
        reflection = ""
        if not settings.enabled:
            raw = read.raw if read is not None else await self.store.raw(thread_id, 0, stop_at_id)
            view = ThreadView(ThreadState(), raw, [])
            memory = assemble(view, settings, fixed_tokens, prompt_tokens, now)
            calibration = read.state.calibration if read is not None else None
        else:
            view = (
                ThreadView(read.state, read.raw, read.log)
                if read is not None
                else await self.store.read(thread_id, stop_at_id)
            )
            threshold = message_threshold(settings, log_tokens(view.log))
            buffering = buffers_observations(settings)
            if buffering and any(not e.active for e in view.log):
                due = activation_due(
                    settings, view.state, pending=view.pending, threshold=threshold, route=route, now=now
                )
                if due:
                    await self.store.activate_buffered(thread_id)
                    observed = True
            if buffering and observation_blocks(settings, view.pending, threshold):
                waited = await self.work.wait(thread_id)
            if observed or waited:
                view = await self.store.read(thread_id, stop_at_id)
                threshold = message_threshold(settings, log_tokens(view.log))
            if view.pending > threshold and observation_blocks(settings, view.pending, threshold) and model_calls:
                await self.work.observe(thread_id, route, settings, stop_at_id=stop_at_id)
                observed = waited = True
                view = await self.store.read(thread_id, stop_at_id)
            active_tokens = log_tokens([e for e in view.log if e.active])
            if buffers_reflections(settings) and reflection_due(settings, active_tokens):
                reflection = await self._reflection_due(
                    thread_id, route, settings, view.state, active_tokens, model_calls=model_calls
                )
                waited = waited or reflection in ("waited", "reflected")
                if reflection:
                    view = await self.store.read(thread_id, stop_at_id)
            elif model_calls and reflection_due(settings, active_tokens):
                if await self.work.reflect(thread_id, route, settings):
                    reflection = "reflected"
                waited = True
                view = await self.store.read(thread_id, stop_at_id)
            memory = assemble(view, settings, fixed_tokens, prompt_tokens, now)
            over = window is not None and over_window(memory.request_tokens, window, view.state.calibration)
            if over and memory.raw_messages > 0 and model_calls:
                # The guard's first resort: observe now, whatever the thresholds say.
                try:
                    await self.work.observe(thread_id, route, settings, stop_at_id=stop_at_id, force=True)
                    observed = waited = True
                except Exception as exc:
                    logger.warning("forced observation failed", extra={"error": str(exc)})
                view = await self.store.read(thread_id, stop_at_id)
                memory = assemble(view, settings, fixed_tokens, prompt_tokens, now)
            calibration = view.state.calibration
        if window is not None and over_window(memory.request_tokens, window, view.state.calibration):
            memory = drop_oldest(memory, window, view.state.calibration)
        if calibration is None:
            calibration = (await self.store.state(thread_id)).calibration
        return dataclasses.replace(
            memory,
            observed=observed,
            waited=waited,
            reflection=reflection,
            window=window,
            settings=settings,
            calibration=calibration,
        )

    async def _reflection_due(
        self,
        thread_id: str,
        route: str,
        settings: MemorySettings,
        state: ThreadState,
        active_tokens: int,
        *,
        model_calls: bool,
    ) -> str:
        """Async reflection once the log passed its threshold: `TurnMemory.reflection`.

        A reflection buffered in the background is activated (no model call). Without one, below
        `reflection_block_after` x threshold the turn goes on with the log as it is while one is
        buffered in the background; at it, the turn waits for the background work, then activates
        what it buffered, or reflects now.
        """
        if await self.store.activate_reflection(thread_id, state.generation):
            return "activated"
        if not reflection_blocks(settings, active_tokens):
            if model_calls and not self.work.busy(thread_id):
                self.work.start_reflecting(thread_id, route, settings)
            return ""
        if await self.work.wait(thread_id) and await self.store.activate_reflection(thread_id, state.generation):
            return "waited"
        if model_calls and await self.work.reflect(thread_id, route, settings):
            return "reflected"
        return ""

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
        self.turns.turn_ended(thread_id)
        factor = based_on = None
        if memory is not None and reported_prompt_tokens:
            based_on = memory.calibration
            factor = Calibration(based_on).observe(reported_prompt_tokens, memory.request_tokens).factor
        finished = await self.store.finish_turn(thread_id, route, factor, based_on)
        settings = memory.settings if memory is not None and memory.settings is not None else None
        if settings is None or not settings.enabled:
            return
        if self.work.busy(thread_id):
            return
        if buffers_observations(settings):
            unbuffered = finished.unbuffered_tokens
            if unbuffered is None:  # a message not counted yet (stored by an older build, or by a failed turn)
                unbuffered = sum(m.tokens for m in await self.store.raw(thread_id, finished.buffered_seq))
            if buffering_starts(settings, unbuffered):
                self.work.start_buffering(thread_id, route, settings)
                return
        if background_reflection_starts(settings, finished.active_log_tokens) and not (
            await self.store.reflection_buffered(thread_id, finished.generation + 1)
        ):
            self.work.start_reflecting(thread_id, route, settings)
