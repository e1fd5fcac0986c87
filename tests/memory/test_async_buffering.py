"""Async buffering: the Observer runs in the background between turns, its entries are activated
(no model call) at the threshold, after idle time or on a model change; a turn waits only at block_after."""

from __future__ import annotations

import asyncio
import datetime as dt

from memory.harness import OTHER_MODEL, Conversation, Conversations, settings
from support.memory_agents import is_observer, is_reflector, memory_agents, observe
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


class HeldObserver:
    """A responder whose Observer call starts, then holds its answer until released (the other agents answer)."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, body: Body) -> Turn:
        if is_observer(body):
            self.started.set()
            await self.release.wait()
            return observe(body)
        return answer_others(body)


async def turns_until_the_observer_starts(conversation: Conversation, observer: HeldObserver) -> int:
    """Turns until the background Observer has started; how many turns that took."""
    n = 0
    while not observer.started.is_set():
        n += 1
        await conversation.turn(TEXT.format(n=n), ASYNC)
        await asyncio.sleep(0)
    return n


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
    observer = HeldObserver()
    conversations.gateway.responder = observer
    conversation = await conversations.new()
    try:
        n = await turns_until_the_observer_starts(conversation, observer)
        background = conversations.memory.background(conversation.thread_id)
        assert background is not None and not background.done()
        # Turns complete while the Observer is still busy (below block_after they never wait on it).
        for _ in range(3):
            n += 1
            record = await asyncio.wait_for(conversation.turn(TEXT.format(n=n), ASYNC), 30)
            assert not record.memory.waited
        assert not background.done()
    finally:
        observer.release.set()
    await settle(conversation)


async def test_at_block_after_the_turn_waits_for_the_observation(conversations: Conversations) -> None:
    observer = HeldObserver()
    conversations.gateway.responder = observer
    conversation = await conversations.new()
    n = await turns_until_the_observer_starts(conversation, observer)
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
    observer.release.set()
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


ASYNC_REFLECTION = settings(
    observation_message_tokens=200,
    reflection_observation_tokens=400,
    async_reflection_enabled=True,
    reflection_buffer_activation=0.5,
    reflection_block_after=2.0,
)
LONGER = TEXT + " It goes on a little, so that each of them leaves an observation of its own behind."


def reflector_requests(conversations: Conversations) -> int:
    return sum(1 for body in conversations.gateway.requests if is_reflector(body))


async def _generation(conversations: Conversations, conversation: Conversation) -> int:
    value = await conversations.pool.fetchval(
        "SELECT generation FROM popagent_observation_state WHERE thread_id = $1", conversation.thread_id
    )
    return value or 0


async def _active_log_tokens(conversations: Conversations, conversation: Conversation) -> int:
    return await conversations.pool.fetchval(
        "SELECT coalesce(sum(o.tokens), 0) FROM popagent_observations o JOIN popagent_observation_state s"
        " USING (thread_id) WHERE o.thread_id = $1 AND o.generation = s.generation AND o.active",
        conversation.thread_id,
    )


async def test_a_background_reflection_is_buffered_then_activated_at_the_threshold(
    conversations: Conversations,
) -> None:
    conversations.gateway.responder = memory_agents()
    conversation = await conversations.new()
    n = started_at_tokens = 0
    while reflector_requests(conversations) == 0:
        n += 1
        assert n < 80, "no background reflection started"
        await conversation.turn(LONGER.format(n=n), ASYNC_REFLECTION)
        started_at_tokens = await _active_log_tokens(conversations, conversation)
        await settle(conversation)
    # It started past the buffer-activation fraction, before the threshold, and once done it was
    # only buffered: the log the turns see is still generation 0, the reflection stored beside it.
    assert 200 < started_at_tokens <= 400, started_at_tokens
    assert await _generation(conversations, conversation) == 0
    buffered = await conversations.pool.fetchrow(
        "SELECT content, last_message_seq FROM popagent_observations"
        " WHERE thread_id = $1 AND generation = 1 AND kind = 'reflection' AND NOT active",
        conversation.thread_id,
    )
    assert buffered is not None
    while True:
        n += 1
        assert n < 160, "the buffered reflection was never activated"
        before = len(conversations.gateway.requests)
        log_before = await _active_log_tokens(conversations, conversation)
        record = await conversation.turn(LONGER.format(n=n), ASYNC_REFLECTION)
        if await _generation(conversations, conversation) > 0:
            break
        assert buffered["content"] not in record.memory.observations
        await settle(conversation)
    # Activated by the turn whose log passed the threshold (after this turn's own observation, if
    # any), without a Reflector call in it.
    assert log_before <= 400 or record.memory.observed
    sent = conversations.gateway.requests[before:]
    chat_at = next(i for i, body in enumerate(sent) if body is record.request)
    assert not any(is_reflector(body) for body in sent[:chat_at])
    assert record.memory.reflection == "activated"
    assert record.memory.observations.find(buffered["content"]) > 0
    # The entries observed while it ran (after the messages it covers) came along, after it.
    later = await conversations.pool.fetch(
        "SELECT content FROM popagent_observations WHERE thread_id = $1 AND generation = 0 AND active"
        " AND last_message_seq > $2 ORDER BY seq",
        conversation.thread_id,
        buffered["last_message_seq"],
    )
    assert later
    block = record.memory.observations
    positions = [block.find(row["content"]) for row in later]
    assert all(p > block.find(buffered["content"]) for p in positions), positions
    # Generation 0 is kept as it was.
    kept = await conversations.pool.fetchval(
        "SELECT count(*) FROM popagent_observations WHERE thread_id = $1 AND generation = 0 AND active",
        conversation.thread_id,
    )
    assert kept >= len(later) + 1
    await settle(conversation)


async def test_at_reflection_block_after_the_turn_waits_for_the_background_reflection(
    conversations: Conversations,
) -> None:
    release = asyncio.Event()
    started = asyncio.Event()

    async def slow_reflector(body: Body) -> Turn:
        if is_reflector(body):
            started.set()
            await release.wait()
        return answer_others(body)

    conversations.gateway.responder = slow_reflector
    block_after = settings(**{**ASYNC_REFLECTION.__dict__, "reflection_block_after": 1.5})
    conversation = await conversations.new()
    n = 0
    try:
        while not started.is_set():
            n += 1
            assert n < 80, "no background reflection started"
            await conversation.turn(LONGER.format(n=n), block_after)
            await asyncio.sleep(0)
        # Past the threshold but below block_after the turns go on with generation 0's log; the
        # first turn whose log reaches block_after waits.
        past_threshold = 0
        while True:
            n += 1
            assert n < 200, "no turn waited for the reflection"
            turn = asyncio.create_task(conversation.turn(LONGER.format(n=n), block_after))
            await asyncio.wait({turn}, timeout=10)
            if not turn.done():
                break
            assert turn.result().memory.reflection == ""
            past_threshold += await _active_log_tokens(conversations, conversation) > 400
        blocked = turn
        assert past_threshold > 0, "no turn went on past the threshold without waiting"
        assert await _active_log_tokens(conversations, conversation) >= 400 * 1.5
        assert await _generation(conversations, conversation) == 0
        # The blocked turn started no Reflector of its own beside the buffered one.
        assert reflector_requests(conversations) == 1
    finally:
        release.set()
    record = await asyncio.wait_for(blocked, 30)
    # It waited, then activated what the background buffered (it did not reflect itself). The log
    # it activated (the reflection plus what was observed meanwhile) may start the next
    # generation's own background reflection, so later Reflector calls are not counted here.
    assert record.memory.waited and record.memory.reflection == "waited"
    assert await _generation(conversations, conversation) == 1
    reflection = await conversations.pool.fetchval(
        "SELECT content FROM popagent_observations WHERE thread_id = $1 AND generation = 1 AND kind = 'reflection'",
        conversation.thread_id,
    )
    assert reflection and reflection in record.memory.observations
    await settle(conversation)


async def test_background_observation_runs_between_turns_not_during_one(conversations: Conversations) -> None:
    """A turn in flight keeps the event loop to itself: the Observer request of a background
    observation started before it goes out once the turn has ended."""
    hold = asyncio.Event()
    held = asyncio.Event()
    holding = False

    async def respond(body: Body) -> Turn:
        if holding and not is_observer(body) and not is_reflector(body):
            held.set()
            await hold.wait()
        return answer_others(body)

    conversations.gateway.responder = respond
    conversation = await conversations.new()
    n = 0
    while conversations.memory.background(conversation.thread_id) is None:
        n += 1
        assert n < 60, "no background observation started"
        await settle(conversation)
        await conversation.turn(TEXT.format(n=n), ASYNC)
    observers = observer_requests(conversations)
    holding = True
    turn = asyncio.create_task(conversation.turn(TEXT.format(n=n + 1), ASYNC))
    await held.wait()
    # The turn waits on its model's answer; the background work waits for the turn.
    await asyncio.sleep(0.5)
    assert observer_requests(conversations) == observers
    background = conversations.memory.background(conversation.thread_id)
    assert background is not None and not background.done()
    hold.set()
    record = await asyncio.wait_for(turn, 30)
    assert not record.memory.waited
    await settle(conversation)
    assert observer_requests(conversations) > observers
