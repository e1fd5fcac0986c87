"""Async buffering: the Observer runs in the background between turns, its entries are activated
(no model call) at the threshold, after idle time or on a model change; a turn waits only at block_after."""

from __future__ import annotations

import asyncio
import datetime as dt

from memory.harness import OTHER_MODEL, Conversation, Conversations, settings
from support.memory_agents import is_observer, memory_agents, observe
from support.model_gateway import Body, Turn

TEXT = "A message with enough words in it to count for something in the observation budget, turn {n}."

answer_others = memory_agents()

ASYNC = settings(
    observation_message_tokens=1000,
    async_observation_enabled=True,
    observation_buffer_activation=0.5,
    observation_block_after=2.0,
    raw_history_retention_messages=2,
)


async def settle(conversation: Conversation) -> None:
    task = conversation.harness.memory.background(conversation.thread_id)
    if task is not None:
        await task


def observer_requests(conversations: Conversations) -> int:
    return sum(1 for body in conversations.gateway.requests if is_observer(body))


async def test_buffered_observations_join_the_context_at_the_threshold_without_a_model_call(
    conversations: Conversations,
) -> None:
    conversations.gateway.responder = memory_agents()
    conversation = await conversations.new()
    n = 0
    while observer_requests(conversations) == 0:
        n += 1
        await conversation.turn(TEXT.format(n=n), ASYNC)
        await settle(conversation)
    # Buffered, not yet visible: the context has no observations block.
    buffered_at = n
    assert not conversation.turns[-1].memory.observations
    buffered: list[str] = []
    while not conversation.turns[-1].memory.observations:
        n += 1
        buffered = await _buffered(conversations, conversation)
        record = await conversation.turn(TEXT.format(n=n), ASYNC)
        await settle(conversation)
        assert record.memory.raw_tokens <= ASYNC.observation_message_tokens * ASYNC.observation_block_after
    activated = conversation.turns[-1]
    # It started buffering at about half the threshold and activated at the threshold.
    assert n > buffered_at
    assert activated.memory.observed and not activated.memory.waited
    # What became visible is what the background had buffered before that turn (no Observer call in it).
    assert buffered and all(content in activated.memory.observations for content in buffered)
    assert "User said: " in activated.memory.observations


async def test_a_turn_does_not_wait_for_a_background_observation(conversations: Conversations) -> None:
    release = asyncio.Event()
    started = asyncio.Event()

    async def slow_observer(body: Body) -> Turn:
        if is_observer(body):
            started.set()
            await release.wait()
            return observe(body)
        return answer_others(body)

    conversations.gateway.responder = slow_observer
    conversation = await conversations.new()
    n = 0
    try:
        while not started.is_set():
            n += 1
            await conversation.turn(TEXT.format(n=n), ASYNC)
            await asyncio.sleep(0)
        background = conversations.memory.background(conversation.thread_id)
        assert background is not None and not background.done()
        # Turns complete while the Observer is still busy (below block_after they never wait on it).
        for _ in range(3):
            n += 1
            record = await asyncio.wait_for(conversation.turn(TEXT.format(n=n), ASYNC), 30)
            assert not record.memory.waited
        assert not background.done()
    finally:
        release.set()
    await settle(conversation)


async def test_at_block_after_the_turn_waits_for_the_observation(conversations: Conversations) -> None:
    release = asyncio.Event()
    started = asyncio.Event()

    async def slow_observer(body: Body) -> Turn:
        if is_observer(body):
            started.set()
            await release.wait()
            return observe(body)
        return answer_others(body)

    conversations.gateway.responder = slow_observer
    conversation = await conversations.new()
    n = 0
    while not started.is_set():
        n += 1
        await conversation.turn(TEXT.format(n=n), ASYNC)
        await asyncio.sleep(0)
    # Grow the unobserved history past the threshold while the Observer is held (block_after 2: no wait).
    pending = 0
    while pending < ASYNC.observation_message_tokens * 1.1:
        n += 1
        pending = (await conversation.turn(TEXT.format(n=n), ASYNC)).memory.raw_tokens
    # The setting applies on the next turn: with block_after 1 that turn is past it.
    low_block = settings(**{**ASYNC.__dict__, "observation_block_after": 1.0})
    n += 1
    blocked = asyncio.create_task(conversation.turn(TEXT.format(n=n), low_block))
    await asyncio.sleep(0.3)
    assert not blocked.done(), "the turn past block_after did not wait"
    release.set()
    record = await asyncio.wait_for(blocked, 30)
    assert record.memory.waited and record.memory.observations


async def test_idle_time_and_a_model_change_activate_buffered_observations(conversations: Conversations) -> None:
    conversations.gateway.responder = memory_agents()
    for trigger in ("idle", "provider"):
        memory_settings = settings(
            **{**ASYNC.__dict__, "idle_activation_seconds": 600, "activate_on_provider_change": True}
        )
        conversation = await conversations.new()
        n = 0
        while observer_requests(conversations) == 0 or not await _has_buffered(conversations, conversation):
            n += 1
            await conversation.turn(TEXT.format(n=n), memory_settings)
            await settle(conversation)
        assert not conversation.turns[-1].memory.observations
        if trigger == "idle":
            at = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=601)
            record = await conversation.turn("Back after a break.", memory_settings, at=at)
        else:
            conversation.model = OTHER_MODEL
            record = await conversation.turn("Now on another model.", memory_settings)
        assert record.memory.observed and record.memory.observations, trigger
        conversations.gateway.requests.clear()


async def _buffered(conversations: Conversations, conversation: Conversation) -> list[str]:
    rows = await conversations.pool.fetch(
        "SELECT content FROM popagent_observations WHERE thread_id = $1 AND NOT active ORDER BY seq",
        conversation.thread_id,
    )
    return [row["content"] for row in rows]


async def _has_buffered(conversations: Conversations, conversation: Conversation) -> bool:
    return bool(
        await conversations.pool.fetchval(
            "SELECT count(*) FROM popagent_observations WHERE thread_id = $1 AND NOT active", conversation.thread_id
        )
    )


async def test_a_shared_budget_observes_later_and_never_in_the_background(conversations: Conversations) -> None:
    conversations.gateway.responder = memory_agents()
    # A shared budget: raw messages may use what the empty log leaves of the reflection budget.
    shared = settings(observation_message_tokens=1000, reflection_observation_tokens=1000, shared_budget=True)
    separate = settings(observation_message_tokens=1000, reflection_observation_tokens=1000)
    first: dict[str, int] = {}
    for name, memory_settings in (("shared", shared), ("separate", separate)):
        conversation = await conversations.new()
        n = 0
        while not conversation.turns or not conversation.turns[-1].memory.observed:
            n += 1
            await conversation.turn(TEXT.format(n=n), memory_settings)
            assert conversations.memory.background(conversation.thread_id) is None
        first[name] = n
    assert first["shared"] > first["separate"] * 1.6
