"""A revert appends its compensation only when its source revision is still the latest change of its
target and the target still holds what that revision wrote; otherwise it is refused and changes nothing."""

from __future__ import annotations

import orjson

from evolution.helpers import (
    agent_id,
    autonomy,
    learned_tables,
    publish_failure,
    revisions,
    settled_signals,
    trace_id,
)
from support.reflection import ReflectionRequest, proposal, reflection_responder
from support.stacks import Stack


def strategy_by_goal(request: ReflectionRequest) -> str:
    """`first` cases teach verify_before_answering, `second` cases clarify_first: two sections of one overlay."""
    chosen = [
        ("verify_before_answering" if case["goal"] == "first" else "clarify_first", [case["id"]])
        for case in request.signals
    ]
    return proposal(*chosen)


async def test_a_revert_is_refused_once_a_later_revision_changed_its_target(stack: Stack) -> None:
    agent = agent_id()
    stack.models.responder = reflection_responder(strategy_by_goal)
    async with stack.client() as client, autonomy(client, evolutionEnabled=True):
        await publish_failure(stack, agent, trace_id(), goal="first")
        await settled_signals(client, agent, 1, "applied")
        await publish_failure(stack, agent, trace_id(), goal="second")
        await settled_signals(client, agent, 2, "applied")
        later, earlier = await revisions(client, agent)
        assert later["targetKey"] == earlier["targetKey"] == f"overlay:{agent}"
        before = await learned_tables(stack)

        refused = await client.post(f"/api/autonomy/revisions/{earlier['id']}/revert")
        assert refused.status_code == 409, refused.text
        assert "no longer the latest change of its target" in refused.json()["error"]
        assert await learned_tables(stack) == before

        # The latest one may still be reverted: the refusal was about order, not about reverts at all.
        reverted = await client.post(f"/api/autonomy/revisions/{later['id']}/revert")
        assert reverted.status_code == 200, reverted.text


async def test_a_revert_is_refused_when_the_target_no_longer_holds_what_its_revision_wrote(stack: Stack) -> None:
    agent = agent_id()
    stack.models.responder = reflection_responder(strategy_by_goal)
    async with stack.client() as client, autonomy(client, evolutionEnabled=True):
        await publish_failure(stack, agent, trace_id(), goal="first")
        await settled_signals(client, agent, 1, "applied")
        [revision] = await revisions(client, agent)
        # The overlay changed without a revision (an operator's repair, a restore from an older backup):
        # reverting would write `before` over content the revision never saw.
        drifted = {"verify_before_answering": "Edited by hand."}
        async with stack.db("evolution") as conn:
            await conn.execute(
                "UPDATE popagent_learned_overlays SET sections = $2::jsonb WHERE agent_id = $1",
                agent,
                orjson.dumps(drifted).decode(),
            )
        before = await learned_tables(stack)

        refused = await client.post(f"/api/autonomy/revisions/{revision['id']}/revert")
        assert refused.status_code == 409, refused.text
        assert "the target changed since this revision" in refused.json()["error"]
        assert await learned_tables(stack) == before
