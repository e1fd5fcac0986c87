"""Observational memory's thresholds: when to observe, reflect, buffer, activate or wait, and what
fits a model's window. Pure decisions on the settings and what a read saw; no I/O."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from popagent_agent_runner.memory.observational.observer import Entry, RawMessage, render
from popagent_agent_runner.memory.observational.store import LogEntry, MemorySettings, ThreadState
from popagent_agent_runner.memory.observational.tokens import Calibration, count_text

# What the model keeps free of a window for its answer (at most a quarter of the window).
OUTPUT_RESERVE_TOKENS = 8192
# One Observer call reads at most this much of the raw history; more is observed in several calls.
MAX_BATCH_TOKENS = 40_000
# The order the Reflector's lines are left out in when its log is over the reflection threshold.
PRIORITY_ORDER = ("🟢", "🟡", "✅", "🔴")


def log_tokens(log: Sequence[LogEntry]) -> int:
    return sum(e.tokens for e in log)


def message_threshold(settings: MemorySettings, logged_tokens: int) -> int:
    """The unobserved raw history over which the Observer runs."""
    if not settings.shared_budget:
        return settings.observation_message_tokens
    # A shared budget: what the log does not use of the reflection budget goes to raw messages.
    total = settings.observation_message_tokens + settings.reflection_observation_tokens
    return max(total - logged_tokens, settings.observation_message_tokens)


def buffers_observations(settings: MemorySettings) -> bool:
    return settings.async_observation_enabled and not settings.shared_budget


def buffers_reflections(settings: MemorySettings) -> bool:
    return settings.async_reflection_enabled and not settings.shared_budget


def activation_due(
    settings: MemorySettings, state: ThreadState, *, pending: int, threshold: int, route: str, now: dt.datetime
) -> bool:
    """Whether buffered observations join the context now: at the threshold, after
    `idle_activation_seconds` without a turn, or when the model changed (`activate_on_provider_change`)."""
    idle = (
        settings.idle_activation_seconds > 0
        and state.last_turn_at is not None
        and (now - state.last_turn_at).total_seconds() >= settings.idle_activation_seconds
    )
    changed = settings.activate_on_provider_change and state.last_model not in (None, route)
    return pending >= threshold or idle or changed


def observation_blocks(settings: MemorySettings, pending: int, threshold: int) -> bool:
    """Whether the turn waits for observation: always without buffering, with it only once the
    unobserved history reached `observation_block_after` x threshold."""
    return not buffers_observations(settings) or pending >= threshold * settings.observation_block_after


def reflection_due(settings: MemorySettings, active_log_tokens: int) -> bool:
    return active_log_tokens > settings.reflection_observation_tokens


def reflection_blocks(settings: MemorySettings, active_log_tokens: int) -> bool:
    """Whether the turn waits for an async reflection: at `reflection_block_after` x threshold."""
    return active_log_tokens >= settings.reflection_observation_tokens * settings.reflection_block_after


def buffering_starts(settings: MemorySettings, unbuffered_tokens: int) -> bool:
    """Whether background observation starts after a turn: from `observation_buffer_activation` x threshold."""
    return unbuffered_tokens >= message_threshold(settings, 0) * settings.observation_buffer_activation


def background_reflection_floor(settings: MemorySettings) -> int:
    """The log a background reflection condenses once it is over: `reflection_buffer_activation` x threshold."""
    return int(settings.reflection_observation_tokens * settings.reflection_buffer_activation)


def background_reflection_starts(settings: MemorySettings, active_log_tokens: int) -> bool:
    reflect_at = settings.reflection_observation_tokens * settings.reflection_buffer_activation
    return buffers_reflections(settings) and active_log_tokens > reflect_at


def observation_batch(raw: Sequence[RawMessage], settings: MemorySettings, *, force: bool) -> list[RawMessage]:
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


def bounded_reflection(entries: Sequence[Entry], limit: int) -> str:
    """The reflected log within `limit` tokens: low-priority lines go first, then medium, oldest first."""
    kept = list(entries)
    content = render(kept)
    for marker in PRIORITY_ORDER:
        while count_text(content) >= limit and any(f"* {marker} " in e.line for e in kept):
            index = next(i for i, e in enumerate(kept) if f"* {marker} " in e.line)
            kept.pop(index)
            content = render(kept)
    return content


def request_budget(window: int) -> int:
    """What a request may take of a model's `window`: all but the output reserve."""
    return window - min(OUTPUT_RESERVE_TOKENS, window // 4)


def over_window(request_tokens: int, window: int, calibration: float) -> bool:
    return Calibration(calibration).provider_tokens(request_tokens) > request_budget(window)
