"""Several evolution processes over one database and bus: every signal is learned from exactly once."""

from __future__ import annotations

import asyncio
import collections
import uuid

from evolution.helpers import agent_id, autonomy, publish_failure, revisions, settled_signals, trace_id
from support.model_gateway import Body, Turn
from support.reflection import ReflectionRequest, is_reflection, parse, proposal, reflection_responder
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
        # The lesson names the cases, so every application changes the overlay (and appends a revision).
        lesson = "Seen in " + ", ".join(case["goal"] for case in request.signals)
        return Turn.say(proposal(("verify_before_answering", request.ids), lesson=lesson))

    stack.models.responder = slow_reflection
    async with (
        stack.client() as client,
        autonomy(client, evolutionEnabled=True),
        stack.extra_evolution(POPAGENT_EVOLUTION_BATCH_SIZE="1"),
    ):
        # Each case its own goal, which the lesson names.
        for case in range(6):
            await publish_failure(stack, agent, trace_id(), goal=f"case {case}")
        applied = await settled_signals(client, agent, 6, "applied")
        cited = collections.Counter(sid for r in await revisions(client, agent) for sid in r["signalIds"])

    reflected = collections.Counter(sid for request in seen for sid in request.ids)
    assert set(reflected) == {s["id"] for s in applied}
    assert set(reflected.values()) == {1}
    assert cited == reflected


async def test_a_claim_abandoned_by_a_dead_worker_is_recovered_and_learned_from(stack: Stack) -> None:
    agent = agent_id()
    stack.models.responder = reflection_responder(lambda r: proposal(("clarify_first", r.ids)))
    async with stack.client() as client, autonomy(client, evolutionEnabled=True):
        async with stack.db("evolution") as conn:
            # Claimed a day ago by a worker that never came back (its attempt counts).
            await conn.execute(
                "INSERT INTO popagent_evolution_signals (id, event_id, trace_id, turn_id, session_id, agent_id,"
                " failure_class, goal, evidence, status, attempts, max_attempts, due_at, claimed_at, claimed_by,"
                " last_error) VALUES ($1, 'e1', $2, 't1', 's1', $3, 'rejected', 'do it', 'failed', 'claimed', 1, 3,"
                " now() - interval '1 day', now() - interval '1 day', 'gone-worker', '')",
                uuid.uuid4(),
                trace_id(),
                agent,
            )
        [signal] = await settled_signals(client, agent, 1, "applied")
    assert signal["attempts"] == 2


async def test_worker_start_and_stop_are_serialized(stack: Stack) -> None:
    async with stack.extra_evolution() as running:
        worker = running.worker
        assert worker is not None and worker.running
        name = f"evolution-worker-{worker.name}"
        most_alive = 0
        watching = True

        async def watch() -> None:
            # A start that does not wait for a stop to finish leaves the cancelled loop alive beside the new one.
            nonlocal most_alive
            while watching:
                alive = [t for t in asyncio.all_tasks() if t.get_name() == name and not t.done()]
                most_alive = max(most_alive, len(alive))
                await asyncio.sleep(0)

        watcher = asyncio.create_task(watch())
        await asyncio.sleep(0)
        await asyncio.gather(worker.stop(), worker.start(), worker.stop(), worker.start(), worker.start())
        for _ in range(20):
            await asyncio.sleep(0)
        watching = False
        await watcher
        # The transitions ran one after another in call order: never two loops, the last was a start.
        assert most_alive == 1
        assert worker.running
        loops = [t for t in asyncio.all_tasks() if t.get_name() == name]
        assert len([t for t in loops if not t.done()]) == 1
        await asyncio.gather(worker.stop(), worker.stop())
        assert not worker.running
