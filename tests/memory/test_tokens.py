"""Token accounting: a real o200k BPE offline, each message counted once, calibration bounded."""

from __future__ import annotations

from pydantic_ai.messages import ModelRequest, UserPromptPart

from memory.harness import Conversations, settings
from popagent_agent_runner.memory.observational.tokens import Calibration, count_message, count_text
from support.memory_agents import memory_agents
from support.stacks import MODEL


def test_counts_are_o200k_tokens() -> None:
    # tiktoken's o200k ids for "hello world" are [24912, 2375]: two tokens.
    assert count_text("hello world") == 2
    assert count_text("") == 0
    assert count_text("x" * 1_200_000) > 0  # longer than bpe-openai takes at once
    assert count_message(ModelRequest(parts=[UserPromptPart("hello world")])) == 2 + 4 + 3


def test_calibration_follows_the_provider_within_bounds() -> None:
    calibration = Calibration()
    for _ in range(20):
        calibration = calibration.observe(reported=1500, counted=1000)
    assert 1.45 < calibration.factor <= 1.5
    assert calibration.provider_tokens(1000) > 1000
    wild = Calibration().observe(reported=10**9, counted=10)
    assert wild.factor <= 1.5  # one absurd report moves it at most a quarter of the way to the cap
    assert Calibration().observe(0, 100) == Calibration()


async def test_each_message_is_counted_once_and_the_count_is_stored(conversations: Conversations) -> None:
    conversations.gateway.responder = memory_agents()
    conversation = await conversations.new()
    await conversation.turn("The first message of this thread.", settings())
    counted = await conversations.pool.fetch(
        "SELECT seq, tokens FROM popagent_thread_messages WHERE thread_id = $1 ORDER BY seq", conversation.thread_id
    )
    assert len(counted) == 2 and all(row["tokens"] is None for row in counted)  # counted when first read
    await conversation.turn("The second message.", settings())
    rows = await conversations.pool.fetch(
        "SELECT seq, tokens FROM popagent_thread_messages WHERE thread_id = $1 ORDER BY seq", conversation.thread_id
    )
    assert rows[0]["tokens"] == count_text("The first message of this thread.") + 4 + 3
    # A stored count is what later turns use: it is not counted again.
    await conversations.pool.execute(
        "UPDATE popagent_thread_messages SET tokens = 777 WHERE thread_id = $1 AND seq = $2",
        conversation.thread_id,
        rows[0]["seq"],
    )
    record = await conversation.turn("The third message.", settings())
    assert record.memory.raw_messages == 4
    raw = await conversations.memory.store.raw(conversation.thread_id, 0)
    assert raw[0].tokens == 777
    # The turn's history count is the sum of the stored counts, the history is not tokenized again.
    assert record.memory.raw_tokens == sum(message.tokens for message in raw[:4])


async def test_after_a_turn_the_calibration_follows_the_reported_prompt_tokens(conversations: Conversations) -> None:
    conversations.gateway.responder = memory_agents()
    conversation = await conversations.new()
    await conversation.turn("Calibrate on this thread.", settings())
    memory = conversations.memory
    counted = (await conversation.turn("Once more.", settings(), probe=True)).memory
    assert counted.calibration == 1.0
    await memory.after_turn(conversation.thread_id, MODEL, counted, reported_prompt_tokens=2 * counted.request_tokens)
    factor = (await memory.store.state(conversation.thread_id)).calibration
    assert factor == Calibration().observe(2 * counted.request_tokens, counted.request_tokens).factor > 1.0
    # A turn counted with a factor that has changed since leaves the newer one as it is.
    await memory.after_turn(conversation.thread_id, MODEL, counted, reported_prompt_tokens=3 * counted.request_tokens)
    assert (await memory.store.state(conversation.thread_id)).calibration == factor
    # Without a reported count the factor stays too.
    await memory.after_turn(conversation.thread_id, MODEL, counted)
    assert (await memory.store.state(conversation.thread_id)).calibration == factor
