"""Signals from outcome events on the real bus: deduplicated, bounded and redacted, gated by the autonomy policy."""

from __future__ import annotations

from evolution.helpers import agent_id, autonomy, publish_failure, settled_signals, trace_id
from support.model_gateway import Turn
from support.reflection import ReflectionRequest, reflection_responder
from support.stacks import Stack


async def test_duplicate_events_of_one_trace_give_one_signal_and_a_disabled_policy_ignores_it(stack: Stack) -> None:
    agent, trace = agent_id(), trace_id()
    stack.models.responder = reflection_responder(lambda request: '{"selections": []}')
    async with stack.client() as client:
        # Evolution is disabled (the seeded default): the claimed signal is ignored, no model is asked.
        await publish_failure(stack, agent, trace, times=3)
        [signal] = await settled_signals(client, agent, 1, "ignored")
        # Another class of the same trace is another signal; a success or an unlearnable class is none.
        await publish_failure(stack, agent, trace, failure_class="stop_blocked")
        await publish_failure(stack, agent, trace_id(), failure_class="rate_limit")
        await settled_signals(client, agent, 2, "ignored")
    assert signal["traceId"] == trace and signal["failureClass"] == "rejected"
    assert signal["lastError"] == "evolution is disabled" and signal["attempts"] == 1
    assert stack.models.requests == []
    async with stack.db("evolution") as conn:
        claimed = await conn.fetchval(
            "SELECT count(*) FROM popagent_evolution_signals WHERE agent_id = $1 AND claimed_at IS NOT NULL", agent
        )
    assert claimed == 0


async def test_evidence_is_bounded_and_redacted(stack: Stack) -> None:
    agent = agent_id()
    stack.models.responder = reflection_responder(lambda request: '{"selections": []}')
    async with stack.client() as client:
        await publish_failure(
            stack, agent, trace_id(), goal="deploy with password: hunter2 " + "g" * 900, evidence="x" * 5000
        )
        [signal] = await settled_signals(client, agent, 1, "ignored")
    assert "hunter2" not in signal["goal"] and "[redacted]" in signal["goal"]
    assert len(signal["goal"]) <= 500 and len(signal["evidence"]) <= 2000


async def test_ignore_and_retry_follow_the_signal_status(stack: Stack) -> None:
    agent = agent_id()
    seen: list[ReflectionRequest] = []
    # Every reflection answer is malformed: each attempt fails, the second is the last (a dead letter).
    stack.models.responder = reflection_responder(lambda request: "not json", seen)
    async with stack.client() as client, autonomy(client, evolutionEnabled=True):
        await publish_failure(stack, agent, trace_id())
        [dead] = await settled_signals(client, agent, 1, "dead_letter")
        assert dead["attempts"] == 2
        # In words, not as the library's exception.
        assert dead["lastError"].startswith("the reflection model's answer could not be used ("), dead["lastError"]
        assert "UnexpectedModelBehavior" not in dead["lastError"]
        ignored = await client.post(f"/api/autonomy/signals/{dead['id']}/ignore")
        assert ignored.status_code == 200 and ignored.json()["status"] == "ignored"
        assert (await client.post(f"/api/autonomy/signals/{dead['id']}/ignore")).status_code == 409
        again = await client.post(f"/api/autonomy/signals/{dead['id']}/retry")
        assert again.status_code == 409 and "dead-letter" in again.json()["error"]
        missing = await client.post("/api/autonomy/signals/00000000-0000-0000-0000-000000000000/retry")
        assert missing.status_code == 404

        other = agent_id()
        await publish_failure(stack, other, trace_id())
        [second] = await settled_signals(client, other, 1, "dead_letter")
        retried = await client.post(f"/api/autonomy/signals/{second['id']}/retry")
        assert retried.status_code == 200 and retried.json()["attempts"] == 0
        # Back to pending from attempt zero: claimed and failed twice more.
        [again_dead] = await settled_signals(client, other, 1, "dead_letter")
        assert again_dead["attempts"] == 2


async def test_a_model_gateway_refusing_the_reflection_is_said_in_words(stack: Stack) -> None:
    agent = agent_id()
    stack.models.responder = lambda body: Turn.fail(403, "model gateway: this key may not use the model")
    async with stack.client() as client, autonomy(client, evolutionEnabled=True):
        await publish_failure(stack, agent, trace_id())
        [dead] = await settled_signals(client, agent, 1, "dead_letter")
    assert dead["lastError"].startswith("the model gateway answered HTTP 403 for model "), dead["lastError"]
