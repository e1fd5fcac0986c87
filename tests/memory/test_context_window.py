"""The context-window guard: the window comes from the catalog; a request never exceeds it."""

from __future__ import annotations

from memory.harness import SMALL_MODEL, Conversations, request_tokens, settings
from popagent_agent_runner.memory.observational.layout import DROPPED_MARKER
from support.memory_agents import is_observer, memory_agents

WINDOW = 6_000  # SMALL_MODEL's context_length in the harness's catalog
LONG = "This message is long on purpose and repeats itself to fill the context window quickly. " * 12


async def test_a_request_that_would_not_fit_forces_an_observation_first(conversations: Conversations) -> None:
    conversations.gateway.responder = memory_agents()
    # Thresholds far above the window: only the guard can start an observation.
    memory_settings = settings(observation_message_tokens=100_000, reflection_observation_tokens=100_000)
    conversation = await conversations.new(SMALL_MODEL)
    for n in range(25):
        record = await conversation.turn(f"{n}: {LONG}", memory_settings)
        assert record.memory.window == WINDOW
        assert request_tokens(record.request) < WINDOW
    forced = [r for r in conversation.turns if r.memory.observed]
    assert forced, "the guard never observed"
    assert all(r.memory.dropped == 0 for r in conversation.turns)
    assert any(is_observer(b) for b in conversations.gateway.requests)


async def test_without_observation_the_oldest_messages_are_dropped_behind_a_marker(
    conversations: Conversations,
) -> None:
    conversations.gateway.responder = memory_agents()
    conversation = await conversations.new(SMALL_MODEL)
    off = settings(enabled=False)
    for n in range(25):
        record = await conversation.turn(f"{n}: {LONG}", off)
        assert request_tokens(record.request) < WINDOW
    last = conversation.turns[-1]
    assert last.memory.dropped > 0
    users = [str(m["content"]) for m in last.request["messages"] if m["role"] == "user"]
    assert users[0] == DROPPED_MARKER.format(n=last.memory.dropped)
    assert users[-1].startswith("24: ")
    assert not any(is_observer(b) for b in conversations.gateway.requests)
    # Nothing was deleted: the thread still holds every message.
    assert len(await conversations.originals(conversation.thread_id)) == 50
