"""Several evolution processes over one database and bus: every signal is learned from exactly once."""

from __future__ import annotations

import asyncio
import collections

from evolution.helpers import agent_id, autonomy, publish_failure, revisions, settled_signals, trace_id
from support.model_gateway import Body, Turn
from support.reflection import ReflectionRequest, is_reflection, parse, proposal
from support.stacks import Stack


async def test_two_evolution_processes_apply_each_signal_exactly_once(stack: Stack) -> None:
    agent = agent_id()
    seen: list[ReflectionRequest] = []

    async def slow_reflection(body: Body) -> Turn:
        assert is_reflection(body)
        request = parse(body)
        seen.append(request)
        # Slow enough that the other process polls (and finds the rows locked or claimed) meanwhile.
        await asyncio.sleep(0.3)
        return Turn.say(proposal(("verify_before_answering", request.ids)))

    stack.models.responder = slow_reflection
    async with (
        stack.client() as client,
        autonomy(client, evolutionEnabled=True),
        stack.extra_evolution(POPAGENT_EVOLUTION_BATCH_SIZE="1"),
    ):
        # Each case its own goal, so every application changes the overlay (and appends a revision).
        for case in range(6):
            await publish_failure(stack, agent, trace_id(), goal=f"case {case}")
        applied = await settled_signals(client, agent, 6, "applied")
        cited = collections.Counter(sid for r in await revisions(client, agent) for sid in r["signalIds"])

    reflected = collections.Counter(sid for request in seen for sid in request.ids)
    assert set(reflected) == {s["id"] for s in applied}
    assert set(reflected.values()) == {1}
    assert cited == reflected
