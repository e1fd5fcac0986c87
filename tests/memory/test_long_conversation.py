"""A 300-turn scripted conversation over observational memory (in-process turn layer, real
PostgreSQL, real HTTP to the scripted model, which answers the Observer and Reflector too)."""

from __future__ import annotations

import re

from memory.harness import Conversations, request_tokens, settings
from popagent_agent_runner.memory.observational.layout import PREAMBLE
from support.memory_agents import is_observer, is_reflector, memory_agents
from support.model_gateway import Body, Turn

TURNS = 300
TOPICS = ("the garden", "a trip to Porto", "the quarterly report", "a chess opening", "the new bicycle")


def chat_answer(body: Body) -> Turn:
    last = body["messages"][-1]
    return Turn.say(f"Noted: {str(last.get('content'))[:60]}. Anything else about that?")


async def test_three_hundred_turns_stay_bounded_and_keep_every_original(conversations: Conversations) -> None:
    conversations.gateway.responder = memory_agents(chat_answer)
    memory_settings = settings(observation_message_tokens=1000, reflection_observation_tokens=1000)
    conversation = await conversations.new()
    for n in range(1, TURNS + 1):
        text = f"Turn {n}: let me tell you about {TOPICS[n % len(TOPICS)]}, detail number {n * 7}."
        await conversation.turn(text, memory_settings)

    records = conversation.turns
    for record in records:
        # The raw part never exceeds the threshold (+ the turn that crossed it is observed first).
        assert record.memory.raw_tokens <= memory_settings.observation_message_tokens
        assert record.memory.observation_tokens <= memory_settings.reflection_observation_tokens + 100
        sent = request_tokens(record.request)
        assert sent <= memory_settings.observation_message_tokens + memory_settings.reflection_observation_tokens + 200

    observer_calls = [b for b in conversations.gateway.requests if is_observer(b)]
    reflector_calls = [b for b in conversations.gateway.requests if is_reflector(b)]
    # About 100 tokens a turn against a 1000-token threshold: an observation every ~10 turns.
    assert 15 <= len(observer_calls) <= 60, len(observer_calls)
    assert len(reflector_calls) >= 2
    # Observations appear only once the threshold was crossed, not before.
    first_observed = next(i for i, r in enumerate(records) if r.memory.observations)
    assert records[first_observed].memory.observed
    assert not any(r.memory.observed for r in records[:first_observed])
    assert records[first_observed - 1].memory.raw_tokens > 0.9 * memory_settings.observation_message_tokens

    # Every original message is stored, untouched, in order.
    originals = await conversations.originals(conversation.thread_id)
    assert len(originals) == 2 * TURNS
    assert [text for role, text in originals if role == "user"] == [
        f"Turn {n}: let me tell you about {TOPICS[n % len(TOPICS)]}, detail number {n * 7}."
        for n in range(1, TURNS + 1)
    ]

    # Turn 300's request carries the observations block and the newest messages, inside the window.
    last = records[-1]
    system = [m["content"] for m in last.request["messages"] if m["role"] == "system"]
    block = next(content for content in system if PREAMBLE in content)
    assert block == last.memory.observations
    newest_observed = max(int(n) for n in re.findall(r"User said: Turn (\d+):", block))
    first_raw = next(str(m["content"]) for m in last.request["messages"] if m["role"] == "user")
    assert first_raw.startswith(f"Turn {newest_observed + 1}:")
    assert newest_observed >= TURNS - 20
    assert last.memory.window == 128_000 and last.memory.request_tokens < 128_000
    assert "Turn 300" in str(last.request["messages"][-1]["content"])

    # Reflections kept the previous versions of the log.
    generations = await conversations.pool.fetch(
        "SELECT generation, count(*) AS n FROM popagent_observations WHERE thread_id = $1 GROUP BY 1 ORDER BY 1",
        conversation.thread_id,
    )
    assert len(generations) == len(reflector_calls) + 1


async def test_the_observations_block_is_byte_stable_between_observations(conversations: Conversations) -> None:
    conversations.gateway.responder = memory_agents(chat_answer)
    memory_settings = settings(observation_message_tokens=1000, reflection_observation_tokens=50_000)
    conversation = await conversations.new()
    for n in range(40):
        await conversation.turn(
            f"Message {n} about {TOPICS[n % 5]} with some words to make it longer.", memory_settings
        )
    blocks = [r.memory.observations for r in conversation.turns if r.memory.observations]
    assert blocks
    changes = [i for i in range(1, len(blocks)) if blocks[i] != blocks[i - 1]]
    # The block changes only when an observation is appended, and then only by growing at its end.
    for i in changes:
        old_log = blocks[i - 1].removesuffix("\n</observations>")
        assert blocks[i].startswith(old_log)
    assert len(changes) < len(blocks) / 3
    # What the model got is that block, as the first message after the instructions.
    sent = [r.request["messages"] for r in conversation.turns if r.memory.observations]
    assert all(blocks[i] in [m["content"] for m in sent[i] if m["role"] == "system"] for i in range(len(sent)))
