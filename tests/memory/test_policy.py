"""Observational memory's thresholds decided on the settings and what a read saw, without a database
or a model: the same decisions the conversations in the other tests of this folder go through."""

from __future__ import annotations

import datetime as dt

from memory.harness import START, settings
from popagent_agent_runner.memory.observational.observer import Entry, RawMessage, render
from popagent_agent_runner.memory.observational.policy import (
    MAX_BATCH_TOKENS,
    activation_due,
    bounded_reflection,
    buffering_starts,
    buffers_observations,
    message_threshold,
    observation_batch,
    observation_blocks,
    over_window,
    request_budget,
)
from popagent_agent_runner.memory.observational.store import ThreadState
from popagent_agent_runner.memory.observational.tokens import count_text


def _raw(roles: str, tokens: int = 100) -> list[RawMessage]:
    """One message per letter: `u` a user message, `a` an assistant one."""
    role = {"u": "user", "a": "assistant"}
    return [RawMessage(seq, f"m{seq}", role[r], START, [], tokens) for seq, r in enumerate(roles, start=1)]


def test_a_shared_budget_gives_the_messages_what_the_log_does_not_use() -> None:
    own = settings(observation_message_tokens=1000, reflection_observation_tokens=3000)
    assert message_threshold(own, 2500) == 1000
    shared = settings(observation_message_tokens=1000, reflection_observation_tokens=3000, shared_budget=True)
    assert message_threshold(shared, 0) == 4000
    assert message_threshold(shared, 2500) == 1500
    assert message_threshold(shared, 3500) == 1000
    # A shared budget never buffers: the threshold moves with every observation.
    assert not buffers_observations(settings(async_observation_enabled=True, shared_budget=True))


def test_the_batch_keeps_the_newest_messages_and_ends_where_a_turn_starts() -> None:
    raw = _raw("uauauaua")
    keeping_three = observation_batch(raw, settings(raw_history_retention_messages=3), force=False)
    # Keeping the newest 3 would start the rest on an answer: the cut moves back to a user message.
    assert [m.seq for m in keeping_three] == [1, 2, 3, 4]
    assert [m.seq for m in observation_batch(raw, settings(raw_history_retention_messages=3), force=True)] == list(
        range(1, 9)
    )
    assert observation_batch(_raw("ua"), settings(raw_history_retention_messages=4), force=False) == []


def test_a_batch_stops_at_a_user_message_past_its_token_limit() -> None:
    raw = _raw("uauaua", tokens=MAX_BATCH_TOKENS // 3)
    batch = observation_batch(raw, settings(raw_history_retention_messages=0), force=False)
    # The answer past the limit stays with its prompt; the next user message starts the next batch.
    assert [m.seq for m in batch] == [1, 2, 3, 4]


def test_buffered_observations_activate_at_the_threshold_when_idle_or_on_another_model() -> None:
    now = START + dt.timedelta(hours=1)
    recent = ThreadState(last_model="fake/chat", last_turn_at=now - dt.timedelta(seconds=30))
    plain = settings(async_observation_enabled=True)
    assert activation_due(plain, recent, pending=1000, threshold=1000, route="fake/chat", now=now)
    assert not activation_due(plain, recent, pending=999, threshold=1000, route="fake/chat", now=now)
    idle = settings(async_observation_enabled=True, idle_activation_seconds=30)
    assert activation_due(idle, recent, pending=0, threshold=1000, route="fake/chat", now=now)
    switching = settings(async_observation_enabled=True, activate_on_provider_change=True)
    assert activation_due(switching, recent, pending=0, threshold=1000, route="fake/other", now=now)
    assert not activation_due(switching, ThreadState(), pending=0, threshold=1000, route="fake/other", now=now)


def test_buffering_starts_early_and_blocks_only_late() -> None:
    buffering = settings(
        async_observation_enabled=True,
        observation_message_tokens=1000,
        observation_buffer_activation=0.5,
        observation_block_after=2.0,
    )
    assert not buffering_starts(buffering, 499)
    assert buffering_starts(buffering, 500)
    assert not observation_blocks(buffering, pending=1999, threshold=1000)
    assert observation_blocks(buffering, pending=2000, threshold=1000)
    # Without buffering every observation is the turn's own.
    assert observation_blocks(settings(), pending=0, threshold=1000)


def test_a_reflection_over_its_limit_leaves_out_low_priority_lines_first() -> None:
    lines = [f"* {marker} {word} " + "detail " * 30 for marker, word in (("🔴", "one"), ("🟢", "two"), ("🟡", "three"))]
    entries = [Entry(START, line) for line in lines]
    everything = count_text(render(entries))
    assert bounded_reflection(entries, everything + 1) == render(entries)
    without_low = render([entries[0], entries[2]])
    assert bounded_reflection(entries, count_text(without_low) + 1) == without_low


def test_a_request_fits_a_window_with_the_output_reserve_and_the_calibration() -> None:
    assert request_budget(4000) == 3000  # a quarter of a small window
    assert request_budget(128_000) == 128_000 - 8192
    # The provider's count is the calibrated one, rounded up.
    assert not over_window(2999, 4000, 1.0)
    assert over_window(3000, 4000, 1.0)
    assert over_window(2000, 4000, 1.6)
