"""Learned skills: written by a skill strategy, composed beside the user's, adopted by any user edit."""

from __future__ import annotations

from typing import Any, cast

from chat.helpers import chat, new_session

from evolution.helpers import autonomy, publish_failure, revisions, trace_id
from support.model_gateway import ToolCall, Turn
from support.reflection import proposal, reflection_responder
from support.stacks import Stack
from support.waiting import eventually

SKILL = "troubleshoot-context-window"
LESSON = "Whole files were read at once and filled the context."


def system_text(request: dict[str, Any]) -> str:
    return "\n".join(m["content"] for m in request["messages"] if m["role"] == "system")


async def test_a_learned_skill_reaches_runs_and_a_user_edit_adopts_it_for_good(stack: Stack) -> None:
    stack.models.responder = reflection_responder(lambda r: proposal(("troubleshooting_skill", r.ids), lesson=LESSON))
    trace = trace_id()
    async with stack.client() as client, autonomy(client, evolutionEnabled=True, skillCreationEnabled=True):
        await publish_failure(stack, "popagent", trace, failure_class="context_window", evidence="too long")

        async def learned() -> list[dict[str, Any]]:
            skills = (await client.get("/api/agents/popagent/skills")).json()["skills"]
            return [s for s in skills if s["name"] == SKILL]

        [skill] = cast(list[dict[str, Any]], await eventually(learned, what="the learned skill listed"))
        assert skill["evolutionManaged"] is True and skill["enabled"] is True
        assert "## Cases seen" in skill["instructions"] and LESSON in skill["instructions"]
        [revision] = [r for r in await revisions(client, "popagent") if r["targetKey"] == f"skill:popagent:{SKILL}"]
        assert revision["strategy"] == "troubleshooting_skill" and revision["traceIds"] == [trace]

        # A run lists it in the catalog and `skill` loads it, as any enabled skill.
        stack.models.push(Turn.call(ToolCall("skill", {"name": SKILL}, id="c1")), Turn.say("Loaded."))
        await chat(client, await new_session(client), "the conversation is long")
        first, second = stack.models.requests[-2:]
        assert f"<name>{SKILL}</name>" in system_text(first)
        assert second["messages"][-1]["content"].startswith(f'<skill_content name="{SKILL}">')

        # A user edit adopts it: the user's copy replaces it, and evolution may no longer revert it.
        edited = await client.patch(f"/api/agents/popagent/skills/{skill['id']}", json={"description": "Mine now."})
        assert edited.status_code == 200, edited.text
        mine = edited.json()
        assert mine["evolutionManaged"] is False and mine["id"] != skill["id"]
        assert mine["instructions"] == skill["instructions"] and mine["description"] == "Mine now."
        try:
            [listed] = await learned()
            assert listed["id"] == mine["id"] and listed["evolutionManaged"] is False
            refused = await client.post(f"/api/autonomy/revisions/{revision['id']}/revert")
            assert refused.status_code == 409 and "adopted" in refused.json()["error"]
            # Later learning of the same class leaves the adopted skill alone.
            await publish_failure(stack, "popagent", trace_id(), failure_class="context_window")
            await settled_signals_of(stack, client, trace)
            assert [r for r in await revisions(client, "popagent") if r["targetKey"] == f"skill:popagent:{SKILL}"] == [
                revision
            ]
        finally:
            await client.delete(f"/api/agents/popagent/skills/{mine['id']}")


async def settled_signals_of(stack: Stack, client: Any, trace: str) -> None:
    """Every popagent signal settled (none pending or claimed)."""

    async def open_signals() -> int:
        rows = (await client.get("/api/autonomy/signals", params={"agentId": "popagent"})).json()["signals"]
        return sum(1 for r in rows if r["status"] in ("pending", "claimed"))

    await eventually(open_signals, until=lambda n: n == 0, what="popagent's signals settled")


async def test_skill_tools_never_reach_a_disabled_user_skill_beside_learned_ones(stack: Stack) -> None:
    async with stack.client() as client:
        created = await client.post(
            "/api/agents/popagent/skills",
            json={"name": "off-skill", "description": "Off.", "instructions": "Hidden text.", "enabled": False},
        )
        assert created.status_code == 201
        try:
            stack.models.push(Turn.call(ToolCall("skill_search", {"query": "hidden"}, id="c1")), Turn.say("No."))
            await chat(client, await new_session(client), "search")
            first, second = stack.models.requests[-2:]
            assert "off-skill" not in system_text(first)
            assert second["messages"][-1]["content"] == "No results found."
        finally:
            await client.delete(f"/api/agents/popagent/skills/{created.json()['id']}")
