"""A user's ignore and the autonomy toggle against learning attempts: an ignored pending signal is never
claimed, and a policy turned off while an attempt is in flight wins before any learned mutation."""

from __future__ import annotations

import asyncio

from evolution.helpers import agent_id, autonomy, publish_failure, revisions, settled_signals, signals, trace_id
from support.model_gateway import Body, Turn
from support.reflection import ReflectionRequest, is_reflection, parse, proposal, reflection_responder
from support.stacks import Stack


async def test_an_ignored_pending_signal_is_never_claimed_or_reflected_on(stack: Stack) -> None:
    agent = agent_id()
    seen: list[ReflectionRequest] = []
    stack.models.responder = reflection_responder(lambda r: '{"selections": []}', seen)
    async with stack.client() as client, autonomy(client, evolutionEnabled=True):
        # With the worker paused a new signal stays pending (due, not claimed) for as long as the test needs.
        async with stack.learning_paused():
            await publish_failure(stack, agent, trace_id(), goal="ignored case")
            [pending] = await settled_signals(client, agent, 1, "pending")
            ignored = await client.post(f"/api/autonomy/signals/{pending['id']}/ignore")
            assert ignored.status_code == 200, ignored.text
            assert ignored.json()["status"] == "ignored" and ignored.json()["lastError"] == "ignored by a user"
            # A second case, not ignored: once the worker runs again it shows the worker did run.
            await publish_failure(stack, agent, trace_id(), goal="kept case")
            await settled_signals(client, agent, 2, "pending", "ignored")
        rows = await settled_signals(client, agent, 2, "ignored", "dismissed")
    [still_ignored] = [row for row in rows if row["id"] == pending["id"]]
    assert still_ignored["status"] == "ignored" and still_ignored["attempts"] == 0
    assert [request.ids for request in seen if request.agent_id == agent] == [
        [row["id"] for row in rows if row["id"] != pending["id"]]
    ]


async def test_evolution_turned_off_while_an_attempt_is_in_flight_learns_nothing(stack: Stack) -> None:
    agent = agent_id()
    reflecting = asyncio.Event()
    answer = asyncio.Event()

    async def held_reflection(body: Body) -> Turn:
        assert is_reflection(body)
        request = parse(body)
        reflecting.set()
        await answer.wait()
        # A proposal that would change the overlay, were the policy still on.
        return Turn.say(proposal(("verify_before_answering", request.ids)))

    stack.models.responder = held_reflection
    async with stack.client() as client, autonomy(client, evolutionEnabled=True):
        await publish_failure(stack, agent, trace_id())
        await asyncio.wait_for(reflecting.wait(), 15)
        [claimed] = await signals(client, agent)
        assert claimed["status"] == "claimed"
        # The user's ignore cannot take a signal out of an attempt: the attempt holds it.
        refused = await client.post(f"/api/autonomy/signals/{claimed['id']}/ignore")
        assert refused.status_code == 409 and "claimed" in refused.json()["error"]
        disabled = await client.patch("/api/settings/autonomy", json={"evolutionEnabled": False})
        assert disabled.status_code == 200, disabled.text
        answer.set()
        [settled] = await settled_signals(client, agent, 1, "ignored", "applied")
        assert settled["status"] == "ignored" and settled["lastError"] == "evolution is disabled"
        assert await revisions(client, agent) == []
