"""Learning reaches every agent: each agent run of a turn (the supervisor's and each delegation's)
publishes its own outcome, so a specialist's failed delegation is the specialist's signal, and
successes are counted, so a reflection reads the agent's rate and not only its failures."""

from __future__ import annotations

from typing import Any

from chat.helpers import chat, new_session, text_of

from evolution.helpers import autonomy, signals
from support.model_gateway import ToolCall, Turn
from support.reflection import ReflectionRequest, proposal, reflection_responder
from support.stacks import Stack
from support.waiting import eventually


async def outcome_counts(stack: Stack) -> dict[tuple[str, bool], int]:
    async with stack.db("evolution") as conn:
        rows = await conn.fetch(
            "SELECT agent_id, succeeded, count(*) AS n FROM popagent_evolution_outcomes"
            " WHERE agent_id IN ('popagent', 'researcher') GROUP BY 1, 2"
        )
    return {(row["agent_id"], row["succeeded"]): row["n"] for row in rows}


async def test_a_failed_delegation_is_the_specialists_signal_and_reflection_reads_the_rate(stack: Stack) -> None:
    seen: list[ReflectionRequest] = []
    stack.models.responder = reflection_responder(lambda request: proposal(("clarify_first", request.ids)), seen)
    async with stack.db("evolution") as conn:
        await conn.execute("DELETE FROM popagent_evolution_outcomes WHERE agent_id IN ('popagent', 'researcher')")
    async with stack.client() as client, autonomy(client, evolutionEnabled=True):
        # A turn whose delegation succeeds: two successes, one per agent run, and no signal.
        stack.models.push(
            Turn.call(ToolCall("researcher", {"brief": "Find the release date."}, id="d1")),
            Turn.say("It shipped on 2 March."),
            Turn.say("It shipped on 2 March, says the researcher."),
        )
        chunks = await chat(client, await new_session(client), "when did it ship?")
        assert text_of(chunks) == "It shipped on 2 March, says the researcher."
        await eventually(
            lambda: outcome_counts(stack),
            until=lambda counts: counts == {("popagent", True): 1, ("researcher", True): 1},
            what="both runs' successes counted",
        )

        # A turn whose delegation fails (the model gateway refuses the researcher's request): the
        # supervisor still answers, so the failure is the researcher's, not popagent's.
        stack.models.push(
            Turn.call(ToolCall("researcher", {"brief": "Find the changelog."}, id="d2")),
            Turn.fail(400, "bad request upstream"),
            Turn.say("The researcher could not look it up."),
        )
        chunks = await chat(client, await new_session(client), "what changed?")
        assert text_of(chunks) == "The researcher could not look it up."
        trace = chunks[0]["messageMetadata"]["traceId"]

        async def researcher_signals() -> list[dict[str, Any]]:
            return [s for s in await signals(client, "researcher") if s["traceId"] == trace]

        async def applied() -> list[str]:
            return [s["status"] for s in await researcher_signals()]

        await eventually(applied, until=lambda statuses: statuses == ["applied"], what="the applied signal")
        [signal] = await researcher_signals()
        assert (signal["agentId"], signal["failureClass"]) == ("researcher", "rejected")
        assert signal["goal"] == "Find the changelog."
        assert not [s for s in await signals(client, "popagent") if s["traceId"] == trace]
        assert await outcome_counts(stack) == {
            ("popagent", True): 2,
            ("researcher", True): 1,
            ("researcher", False): 1,
        }
        [request] = [r for r in seen if signal["id"] in r.ids]
        assert request.agent_id == "researcher"
        assert "Recent outcomes (last 7 days): 1 succeeded, 1 failed (50% failed)." in request.prompt
