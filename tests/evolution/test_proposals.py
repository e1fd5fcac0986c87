"""What reflection may propose, and what applying a proposal may change: citations, secrets, boundaries, policy."""

from __future__ import annotations

import uuid

from evolution.helpers import (
    agent_id,
    autonomy,
    learned_tables,
    publish_failure,
    revisions,
    settled_signals,
    signals,
    trace_id,
)
from support.canary import CANARY
from support.reflection import ReflectionRequest, proposal, reflection_responder
from support.stacks import Stack


async def test_a_proposal_citing_another_agents_signal_is_rejected(stack: Stack) -> None:
    first, second = agent_id(), agent_id()
    citations: dict[str, list[str]] = {}

    def choose(request: ReflectionRequest) -> str:
        # The second agent's proposal also cites the first agent's (settled, unclaimed) signal.
        cited = [*request.ids, *citations.get("foreign", [])]
        return proposal(("tool_failure_checklist", cited)) if request.agent_id == second else proposal()

    stack.models.responder = reflection_responder(choose)
    async with stack.client() as client, autonomy(client, evolutionEnabled=True):
        await publish_failure(stack, first, trace_id())
        [foreign] = await settled_signals(client, first, 1, "dismissed")
        citations["foreign"] = [foreign["id"]]
        await publish_failure(stack, second, trace_id())
        [rejected] = await settled_signals(client, second, 1, "dead_letter")
        assert "proposal rejected" in rejected["lastError"] and foreign["id"] in rejected["lastError"]
        assert await revisions(client, second) == [] and await revisions(client, first) == []


async def test_a_secret_bearing_proposal_changes_no_learned_table(stack: Stack) -> None:
    agent = agent_id()
    stack.models.responder = reflection_responder(
        lambda r: proposal(("verify_before_answering", r.ids), lesson=f"the form said: {CANARY}")
    )
    before = await learned_tables(stack)
    async with stack.client() as client, autonomy(client, evolutionEnabled=True):
        # Evidence the ingest redaction did not catch (the canary is no known key format): the
        # reflection's lesson quotes it, so the whole proposal fails before any write.
        async with stack.db("evolution") as conn:
            await conn.execute(
                "INSERT INTO popagent_evolution_signals (id, event_id, trace_id, turn_id, session_id, agent_id,"
                " failure_class, goal, evidence, status, attempts, max_attempts, due_at, last_error)"
                " VALUES ($1, 'e1', $2, 't1', 's1', $3, 'rejected', 'log in', $4, 'pending', 0, 2, now(), '')",
                uuid.uuid4(),
                trace_id(),
                agent,
                f"the form said: {CANARY}",
            )
        [failed] = await settled_signals(client, agent, 1, "dead_letter")
    assert "credential-like" in failed["lastError"]
    assert CANARY not in failed["lastError"]
    assert await learned_tables(stack) == before


async def test_a_proposal_reaching_past_its_strategy_and_signals_fails_whole(stack: Stack) -> None:
    agent = agent_id()
    # A field the closed schema has no place for (a tool membership): the answer is refused.
    stack.models.responder = reflection_responder(
        lambda r: proposal(("verify_before_answering", r.ids), tools=["getTime"], workspaceAccess="read-write")
    )
    before = await learned_tables(stack)
    async with stack.client() as client, autonomy(client, evolutionEnabled=True):
        await publish_failure(stack, agent, trace_id())
        [failed] = await settled_signals(client, agent, 1, "dead_letter")
    assert failed["lastError"]
    assert await learned_tables(stack) == before


async def test_a_disabled_target_policy_ignores_skill_proposals_before_any_write(stack: Stack) -> None:
    agent = agent_id()
    stack.models.responder = reflection_responder(lambda r: proposal(("troubleshooting_skill", r.ids)))
    before = await learned_tables(stack)
    async with stack.client() as client, autonomy(client, evolutionEnabled=True, skillCreationEnabled=False):
        await publish_failure(stack, agent, trace_id())
        [ignored] = await settled_signals(client, agent, 1, "ignored")
        assert ignored["lastError"] == "skill creation is disabled"
        assert [s["status"] for s in await signals(client, agent, status="ignored")] == ["ignored"]
    assert await learned_tables(stack) == before
