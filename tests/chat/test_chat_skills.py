"""Agent Skills at run time, over the real chat stack: the catalog, the skill tools, enablement."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx

from chat.helpers import chat, new_session
from support.model_gateway import ToolCall, Turn
from support.stacks import Stack

SKILL_TOOLS = ["skill", "skill_read", "skill_search"]


def tool_names(request: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in request.get("tools", [])]


def system_text(request: dict[str, Any]) -> str:
    return "\n".join(m["content"] for m in request["messages"] if m["role"] == "system")


def tool_results(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


@contextlib.asynccontextmanager
async def skill(client: httpx.AsyncClient, agent_id: str, **fields: Any) -> AsyncIterator[dict[str, Any]]:
    created = await client.post(f"/api/agents/{agent_id}/skills", json=fields)
    assert created.status_code == 201, created.text
    try:
        yield created.json()
    finally:
        await client.delete(f"/api/agents/{agent_id}/skills/{created.json()['id']}")


@contextlib.asynccontextmanager
async def only_skills_disabled(client: httpx.AsyncClient, agent_id: str) -> AsyncIterator[None]:
    """Every skill the agent has now disabled for the block, then enabled again (the stack is shared)."""
    skills = (await client.get(f"/api/agents/{agent_id}/skills")).json()["skills"]
    enabled = [s["id"] for s in skills if s["enabled"]]
    for skill_id in enabled:
        assert (await client.patch(f"/api/agents/{agent_id}/skills/{skill_id}", json={"enabled": False})).is_success
    try:
        yield
    finally:
        for skill_id in enabled:
            await client.patch(f"/api/agents/{agent_id}/skills/{skill_id}", json={"enabled": True})


async def test_the_skill_tools_load_only_enabled_skills(stack: Stack) -> None:
    async with (
        stack.client() as client,
        skill(
            client,
            "popagent",
            name="deploy-checklist",
            description="Steps before a deployment.",
            instructions="1. Run the migrations check.\n2. Confirm the rollback plan.",
            references={"references/rollback.md": "line one\nRollback: revert the tag\nline three"},
        ),
        skill(
            client,
            "popagent",
            name="hidden-practice",
            description="A disabled skill.",
            instructions="The hidden rollback ritual.",
            enabled=False,
        ),
    ):
        stack.models.push(
            Turn.call(
                ToolCall("skill", {"name": "deploy-checklist"}, id="c1"),
                ToolCall("skill", {"name": "hidden-practice"}, id="c2"),
                ToolCall(
                    "skill_read",
                    {
                        "skill_name": "deploy-checklist",
                        "path": "references/rollback.md",
                        "start_line": 2,
                        "end_line": 2,
                    },
                    id="c3",
                ),
                ToolCall("skill_search", {"query": "rollback"}, id="c4"),
                ToolCall("skill_read", {"skill_name": "hidden-practice", "path": "x.md"}, id="c5"),
            ),
            Turn.say("Checked."),
        )
        session = await new_session(client)
        await chat(client, session, "deploy it")

    first, second = stack.models.requests[-2:]
    assert [name for name in tool_names(first) if name in SKILL_TOOLS] == SKILL_TOOLS
    system = system_text(first)
    # The catalog: names and descriptions of the enabled skills only, never their instructions.
    assert "<name>deploy-checklist</name><description>Steps before a deployment.</description>" in system
    assert "<name>delegation-brief</name>" in system
    assert "hidden-practice" not in system and "migrations check" not in system
    loaded, refused, read, searched, refused_read = tool_results(second)
    assert loaded.startswith('<skill_content name="deploy-checklist">\n1. Run the migrations check.')
    assert "- references/rollback.md" in loaded
    assert refused.startswith('Skill "hidden-practice" not found.') and "deploy-checklist" in refused
    assert read == "references/rollback.md (lines 2-2 of 3)\nRollback: revert the tag"
    assert "[deploy-checklist]" in searched and "hidden" not in searched
    assert refused_read.startswith('Skill "hidden-practice" not found.')


async def test_an_agent_without_an_enabled_skill_gets_no_skill_tools_or_catalog(stack: Stack) -> None:
    async with stack.client() as client, only_skills_disabled(client, "popagent"):
        stack.models.push(Turn.say("Plain."))
        session = await new_session(client)
        await chat(client, session, "hi")
    [request] = stack.models.requests[-1:]
    assert not set(SKILL_TOOLS) & set(tool_names(request))
    assert "<available_skills>" not in system_text(request)
    assert json.dumps(request).count("delegation-brief") == 0
