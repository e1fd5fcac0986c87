"""The request's layout keeps a provider's prompt cache hitting: over turns whose recalled memories
and gap markers change, each request begins with the previous one's bytes — the stable instructions,
then the observations block, then the raw messages — and only the turn's own parts differ.

Through the real stack (the chat turn's runner), as the scripted model server received the requests.
"""

from __future__ import annotations

import itertools
import uuid
from typing import Any

import orjson
from chat.helpers import chat, new_session

from memory.stack_helpers import LONG, OBSERVE_IN_TURN, memory_settings
from popagent_agent_runner.memory.observational.layout import PREAMBLE
from support.memory_agents import is_observer, is_reflector, memory_agents
from support.model_gateway import Body
from support.stacks import Stack


def _chat_requests(stack: Stack) -> list[Body]:
    return [b for b in stack.models.requests if not is_observer(b) and not is_reflector(b)]


def _wire(request: Body) -> list[bytes]:
    return [orjson.dumps(message) for message in request["messages"]]


def _observations_index(request: Body) -> int:
    return next(i for i, m in enumerate(request["messages"]) if PREAMBLE in str(m.get("content", "")))


def _turn_tail(request: Body) -> int:
    """How many messages the turn itself added after the history: those after the last assistant message."""
    messages: list[dict[str, Any]] = request["messages"]
    last_answer = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
    return len(messages) - last_answer - 1


async def test_each_request_starts_with_the_previous_ones_bytes_while_recall_and_markers_change(
    stack: Stack,
) -> None:
    stack.models.responder = memory_agents()
    tag = uuid.uuid4().hex[:6]
    facts = {
        "cat": f"The user's cat{tag} is called Biscuit",
        "bike": f"The user's bike{tag} is a green Brompton",
        "plant": f"The user's plant{tag} is a fern from Porto",
    }
    async with (
        stack.client() as client,
        memory_settings(
            client,
            **OBSERVE_IN_TURN,
            temporalMarkers=True,
        ),
    ):
        created = [(await client.post("/api/memories", json={"content": fact})).json()["id"] for fact in facts.values()]
        try:
            session = await new_session(client)
            n = 0
            while not any(is_observer(b) for b in stack.models.requests):
                n += 1
                assert n < 20, "no observation happened"
                await chat(client, session, f"{n}: {LONG}")
            # Short turns now: each recalls another memory, and the third comes two hours later (the
            # thread's times moved back once: its gap marker is sent with that turn, then as history).
            prompts = [f"How is my {topic}{tag} doing?" for topic in ("cat", "bike", "plant", "cat", "bike")]
            start = len(_chat_requests(stack))
            for i, prompt in enumerate(prompts):
                if i == 2:
                    async with stack.db() as db:
                        await db.execute(
                            "UPDATE popagent_thread_messages SET created_at = created_at - interval '2 hours'"
                            " WHERE thread_id = $1",
                            session,
                        )
                assert (await chat(client, session, prompt))[-1] == "[DONE]"
            requests = _chat_requests(stack)[start:]
        finally:
            for memory_id in created:
                await client.delete(f"/api/memories/{memory_id}")

    assert len(requests) == len(prompts)
    recalled_changes = markers = compared = 0
    for before, after in itertools.pairwise(requests):
        old, new = _wire(before), _wire(after)
        observations = _observations_index(before)
        # The agent's stable instructions come first and the observations block right after them.
        assert observations > 0 and all(m["role"] == "system" for m in before["messages"][: observations + 1])
        if old[observations] != new[_observations_index(after)]:
            continue  # an observation ran in between: the block changed, as it must
        compared += 1
        # Everything but the turn's own trailing parts is the next request's prefix, byte for byte.
        stable = len(old) - _turn_tail(before)
        assert stable > observations + 1, "no raw messages after the observations block"
        assert new[:stable] == old[:stable], f"prefix broken at message {_first_difference(old, new)} of {stable}"
        assert orjson.dumps(before.get("tools")) == orjson.dumps(after.get("tools"))
        turn_parts = b"".join(old[stable:])
        recalled_changes += any(fact.encode() in turn_parts for fact in facts.values()) and turn_parts != b"".join(
            new[len(new) - _turn_tail(after) :]
        )
        markers += b"later" in turn_parts
    assert compared >= 3, "too few turns without an observation between them"
    assert recalled_changes >= 3, "recall did not change between the compared turns"
    assert markers >= 1, "no gap marker in the compared turns"


def _first_difference(old: list[bytes], new: list[bytes]) -> int:
    return next((i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), min(len(old), len(new)))
