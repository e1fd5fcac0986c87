"""Each memory setting changes the next turn (the settings row is read per turn; here the harness
hands each turn its settings, as the runner does after reading the row)."""

from __future__ import annotations

import base64
import datetime as dt

from pydantic_ai.messages import BinaryContent

from memory.harness import Conversation, Conversations, settings
from popagent_agent_runner.memory.observational.layout import temporal_marker
from popagent_agent_runner.memory.observational.store import MemorySettings
from popagent_agent_runner.memory.observational.tokens import count_messages, count_text
from support.memory_agents import is_observer, is_reflector, memory_agents
from support.model_gateway import Body

TEXT = (
    "Turn {n}: a message of a reasonable length about nothing in particular, kept for the test, with a"
    " second sentence so that a few of them cross the smallest observation threshold there is. It goes on"
    " a little: the point is its size, about a hundred and fifty tokens, not what it says. Words, words,"
    " more words, a number or two (42, 1729), a place (Lisbon), and a name (Ada) to make it look real."
)
# A 1x1 PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


async def fill(conversation: Conversation, memory_settings: MemorySettings, turns: int) -> None:
    for n in range(turns):
        await conversation.turn(TEXT.format(n=n), memory_settings)


def observer_bodies(conversations: Conversations) -> list[Body]:
    return [b for b in conversations.gateway.requests if is_observer(b)]


def system_text(body: Body) -> str:
    return "\n".join(str(m["content"]) for m in body["messages"] if m["role"] == "system")


def user_text(body: Body) -> str:
    texts: list[str] = []
    for message in body["messages"]:
        if message["role"] != "user":
            continue
        content = message["content"]
        if isinstance(content, list):
            texts.extend(str(part.get("text", "")) for part in content if part.get("type") == "text")
        else:
            texts.append(str(content))
    return "\n".join(texts)


async def test_enabled_off_replays_the_whole_thread_on_the_next_turn(conversations: Conversations) -> None:
    conversations.gateway.responder = memory_agents()
    conversation = await conversations.new()
    await fill(conversation, settings(), 10)
    assert conversation.turns[-1].memory.observations
    record = await conversation.turn("And now?", settings(enabled=False))
    assert not record.memory.observations
    assert record.memory.raw_messages == 20
    assert "Turn 0:" in user_text(record.request)


async def test_a_lower_observation_threshold_observes_on_the_next_turn(conversations: Conversations) -> None:
    conversations.gateway.responder = memory_agents()
    conversation = await conversations.new()
    await fill(conversation, settings(observation_message_tokens=100_000), 10)
    assert not observer_bodies(conversations)
    record = await conversation.turn("Next.", settings(observation_message_tokens=1000))
    assert record.memory.observed and record.memory.observations


async def test_a_lower_reflection_threshold_reflects_on_the_next_turn(conversations: Conversations) -> None:
    conversations.gateway.responder = memory_agents()
    conversation = await conversations.new()
    await fill(conversation, settings(reflection_observation_tokens=100_000), 20)
    assert not any(is_reflector(b) for b in conversations.gateway.requests)
    log_tokens = count_text(conversation.turns[-1].memory.observations)
    record = await conversation.turn("Next.", settings(reflection_observation_tokens=max(50, log_tokens // 3)))
    assert any(is_reflector(b) for b in conversations.gateway.requests)
    assert record.memory.observation_tokens < log_tokens


async def test_raw_history_retention_keeps_that_many_newest_messages_raw(conversations: Conversations) -> None:
    conversations.gateway.responder = memory_agents()
    for keep in (2, 8):
        conversation = await conversations.new()
        memory_settings = settings(raw_history_retention_messages=keep)
        await fill(conversation, memory_settings, 20)
        observed_turns = [r for r in conversation.turns if r.memory.observed]
        assert observed_turns
        # Right after an observation, exactly the retained newest messages are still raw.
        assert all(r.memory.raw_messages == keep for r in observed_turns), keep


async def test_async_reflection_runs_in_the_background_from_its_activation_fraction(
    conversations: Conversations,
) -> None:
    conversations.gateway.responder = memory_agents()
    # reflection_block_after 4: no turn's context reaches it, so every reflection is a background one.
    memory_settings = settings(
        reflection_observation_tokens=1000,
        async_reflection_enabled=True,
        reflection_buffer_activation=0.3,
        reflection_block_after=4.0,
    )
    conversation = await conversations.new()
    for n in range(16):
        record = await conversation.turn(TEXT.format(n=n), memory_settings)
        background = conversations.memory.background(conversation.thread_id)
        if background is not None:
            await background
        assert record.memory.observation_tokens <= 1000 + 150
    reflections = [b for b in conversations.gateway.requests if is_reflector(b)]
    assert reflections
    # It started at 30 % of the threshold: the first reflected log was well under the threshold.
    first = user_text(reflections[0]).split("## Observations to condense\n", 1)[1]
    assert 300 < count_text(first) < 1000, count_text(first)


async def test_previous_observation_max_tokens_bounds_what_the_observer_sees(conversations: Conversations) -> None:
    conversations.gateway.responder = memory_agents()
    for limit in (0, 60):
        conversations.gateway.requests.clear()
        conversation = await conversations.new()
        await fill(
            conversation, settings(previous_observation_max_tokens=limit, reflection_observation_tokens=50_000), 20
        )
        bodies = observer_bodies(conversations)
        assert len(bodies) >= 2
        later = user_text(bodies[-1])
        if limit == 0:
            assert "## Previous observations" not in later
        else:
            previous = later.split("## Previous observations (do not repeat them)\n", 1)[1].split("\n\n## New")[0]
            assert 0 < count_text(previous) <= limit


async def test_temporal_markers_mark_gaps_between_messages(conversations: Conversations) -> None:
    conversations.gateway.responder = memory_agents()
    conversation = await conversations.new()
    start = dt.datetime(2026, 11, 3, 8, 0, tzinfo=dt.UTC)
    await conversation.turn("Good morning.", settings(), at=start)
    await conversation.turn("Back three hours later.", settings(), at=start + dt.timedelta(hours=3))
    off = await conversation.turn("Soon after.", settings(), at=start + dt.timedelta(hours=3, minutes=1))
    assert "later —" not in user_text(off.request)
    on = await conversation.turn(
        "A day later.", settings(temporal_markers=True), at=start + dt.timedelta(days=1, hours=3)
    )
    sent = user_text(on.request)
    marker = temporal_marker(start + dt.timedelta(seconds=5), start + dt.timedelta(hours=3))
    assert marker is not None and marker in sent
    assert on.memory.prompt_marker is not None and "23 hours" in on.memory.prompt_marker
    # The history's count comes from each message's stored count plus the markers put in it, and
    # is what counting the history the model gets gives.
    assert on.memory.raw_tokens == count_messages(on.memory.history)


async def test_forward_attachments_sends_them_to_the_observer(conversations: Conversations) -> None:
    conversations.gateway.responder = memory_agents()
    for forward in (False, True):
        conversations.gateway.requests.clear()
        conversation = await conversations.new()
        memory_settings = settings(forward_attachments=forward, observation_message_tokens=1000)
        image = BinaryContent(data=PNG, media_type="image/png")
        await conversation.turn("Look at this picture.", memory_settings, prompt=["Look at this picture.", image])
        await fill(conversation, memory_settings, 8)
        body = observer_bodies(conversations)[0]
        parts = [p for m in body["messages"] if isinstance(m.get("content"), list) for p in m["content"]]
        has_image = any(p.get("type") == "image_url" for p in parts if isinstance(p, dict))
        assert has_image is forward
        if not forward:
            assert "[attachment: image/png, not shown]" in user_text(body)


async def test_custom_observer_and_reflector_instructions_reach_them(conversations: Conversations) -> None:
    conversations.gateway.responder = memory_agents()
    conversation = await conversations.new()
    custom = settings(
        observer_instructions="Always note the user's favourite colour.",
        reflector_instructions="Keep every colour preference.",
        reflection_observation_tokens=1000,
    )
    await fill(conversation, custom, 32)
    observers = observer_bodies(conversations)
    reflectors = [b for b in conversations.gateway.requests if is_reflector(b)]
    assert observers and reflectors
    assert "=== CUSTOM INSTRUCTIONS ===\nAlways note the user's favourite colour." in system_text(observers[-1])
    assert "=== CUSTOM INSTRUCTIONS ===\nKeep every colour preference." in system_text(reflectors[-1])
