"""The four persisted agents over real HTTP: seeded roles, edits, tool and model validation."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import orjson
import pytest

from popagent_agent_runner.tools import KNOWN_TOOLS, ToolRegistry
from support.stacks import Stack

AGENT_IDS = ["popagent", "researcher", "implementer", "reviewer"]
EDITABLE = (
    "displayName",
    "description",
    "instructions",
    "sourceUrl",
    "workspaceAccess",
    "browserAccess",
    "delegationEligible",
    "tools",
    "model",
)


async def agents(client: httpx.AsyncClient) -> dict[str, dict[str, Any]]:
    response = await client.get("/api/agents")
    assert response.status_code == 200
    return {agent["id"]: agent for agent in response.json()["agents"]}


@contextlib.asynccontextmanager
async def restoring(client: httpx.AsyncClient, agent_id: str) -> AsyncIterator[dict[str, Any]]:
    before = (await agents(client))[agent_id]
    try:
        yield before
    finally:
        restore = {key: before[key] for key in EDITABLE}
        assert (await client.patch(f"/api/agents/{agent_id}", json=restore)).status_code == 200


@contextlib.asynccontextmanager
async def rolled_back(api_stack: Stack) -> AsyncIterator[asyncpg.Connection]:
    """A connection to agent-runner's database whose transaction is rolled back after the block:
    other tests share this database."""
    async with api_stack.db("agent_runner") as conn:
        transaction = conn.transaction()
        await transaction.start()
        try:
            yield conn
        finally:
            await transaction.rollback()


async def test_the_four_roles_are_seeded_with_complete_instructions(client: httpx.AsyncClient) -> None:
    response = (await client.get("/api/agents")).json()
    assert [agent["id"] for agent in response["agents"]] == AGENT_IDS
    # Only registered tools are advertised, and no seeded agent lists another.
    assert response["knownTools"] == list(ToolRegistry().names)
    by_id = {agent["id"]: agent for agent in response["agents"]}
    supervisor = by_id["popagent"]
    assert supervisor["delegationEligible"] is False
    assert supervisor["workspaceAccess"] == "read-write"
    for stage in ("research", "implementation", "review", "synthes", "skip"):
        assert stage in supervisor["instructions"].lower(), stage
    for specialist in ("researcher", "reviewer"):
        assert by_id[specialist]["workspaceAccess"] == "read-only"
        assert "read-only" in by_id[specialist]["instructions"]
    # Every agent inherits the default model: no gateway's model id is seeded as an override.
    assert {agent_id: agent["model"] for agent_id, agent in by_id.items()} == dict.fromkeys(AGENT_IDS)
    assert by_id["implementer"]["workspaceAccess"] == "read-write"
    for agent in by_id.values():
        assert len(agent["instructions"]) > 800
        assert agent["sourceUrl"].startswith("https://")
        assert set(agent["tools"]) <= set(response["knownTools"])


async def test_an_edit_changes_only_what_was_sent_and_persists(client: httpx.AsyncClient) -> None:
    async with restoring(client, "implementer") as before:
        response = await client.patch(
            "/api/agents/implementer",
            json={
                "displayName": "Builder",
                "instructions": "Build it well.",
                "workspaceAccess": "read-only",
                "browserAccess": "read-only",
                "tools": ["remember", "getTime"],
                "model": "fake/fake-chat",
            },
        )
        assert response.status_code == 200, response.text
        after = (await agents(client))["implementer"]
        assert after == response.json()
        assert after["displayName"] == "Builder"
        assert after["tools"] == ["remember", "getTime"]
        assert after["model"] == "fake/fake-chat"
        assert after["description"] == before["description"]
        assert after["delegationEligible"] == before["delegationEligible"]
        cleared = await client.patch("/api/agents/implementer", json={"model": None})
        assert cleared.json()["model"] is None


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        ({"tools": ["getTime", "rm -rf"]}, 422, "tools"),
        ({"tools": ["getTime", "launchMissiles"]}, 404, "launchMissiles"),
        # The retired plaintext secret tools are never registered.
        ({"tools": ["storeSecret", "recallSecret"]}, 404, "storeSecret, recallSecret"),
        ({"tools": ["getTime", "getTime"]}, 400, "repeat"),
        ({"workspaceAccess": "admin"}, 422, "workspaceAccess"),
        ({"browserAccess": "read-write"}, 422, "browserAccess"),
        ({"displayName": ""}, 422, "displayName"),
        ({"instructions": None}, 422, "instructions"),
        ({"sourceUrl": "javascript:alert(1)"}, 422, "sourceUrl"),
        ({"delegationEligible": "true"}, 422, "delegationEligible"),
        ({"model": "nobody/no-model"}, 404, "unknown model"),
        ({"model": ""}, 422, "model"),
        ({"id": "other"}, 422, "id"),
        ({}, 422, "at least one field"),
    ],
)
async def test_invalid_edits_are_refused_with_a_reason(
    client: httpx.AsyncClient, body: dict[str, Any], status: int, needle: str
) -> None:
    before = (await agents(client))["researcher"]
    response = await client.patch("/api/agents/researcher", json=body)
    assert response.status_code == status, response.text
    assert needle in response.text
    assert (await agents(client))["researcher"] == before


async def test_the_supervisor_cannot_become_a_delegation_target(client: httpx.AsyncClient) -> None:
    response = await client.patch("/api/agents/popagent", json={"delegationEligible": True})
    assert response.status_code == 409
    assert "delegationEligible" in response.json()["error"]


async def test_unknown_agents_answer_404(client: httpx.AsyncClient) -> None:
    assert (await client.patch("/api/agents/designer", json={"displayName": "x"})).status_code == 404
    assert (await client.patch("/api/agents/Not_An_Id", json={"displayName": "x"})).status_code == 422


async def test_the_role_seed_preserves_rows_that_already_exist(api_stack: Stack) -> None:
    from popagent_agent_runner.service import MIGRATIONS

    seed = (MIGRATIONS / "data" / "0004_seed_agent_roles.sql").read_text()
    async with rolled_back(api_stack) as conn:
        await conn.execute("UPDATE popagent_agents SET instructions = 'user guidance' WHERE id = 'reviewer'")
        await conn.execute("DELETE FROM popagent_agents WHERE id = 'researcher'")
        await conn.execute(seed)
        rows = {r["id"]: r["instructions"] for r in await conn.fetch("SELECT id, instructions FROM popagent_agents")}
        assert rows["reviewer"] == "user guidance"
        assert "read-only" in rows["researcher"]


def test_known_tools_are_the_registered_tools() -> None:
    assert ToolRegistry().names == KNOWN_TOOLS


async def test_an_unregistered_tool_is_refused_with_404_naming_it(client: httpx.AsyncClient) -> None:
    response = await client.patch("/api/agents/implementer", json={"tools": ["getTime", "storeSecret"]})
    assert response.status_code == 404, response.text
    message = response.json()["error"]
    assert message.startswith("tools: not registered: storeSecret") and "getTime" in message


async def test_the_tool_migration_drops_unregistered_tools_and_keeps_edited_guidance(api_stack: Stack) -> None:
    from popagent_agent_runner.service import MIGRATIONS

    fix = (MIGRATIONS / "data" / "0005_drop_unregistered_tools.sql").read_text()
    seed = (MIGRATIONS / "data" / "0004_seed_agent_roles.sql").read_text()
    async with rolled_back(api_stack) as conn:
        # The first seed as it was applied, and a user's own edit of the reviewer.
        await conn.execute("DELETE FROM popagent_agents WHERE id IN ('popagent', 'researcher')")
        await conn.execute(seed)
        await conn.execute(
            "UPDATE popagent_agents SET tools = ARRAY['bifrostNavigator', 'remember', 'webSearch', 'getTime'],"
            " instructions = 'Use webSearch, my way.' WHERE id = 'reviewer'"
        )
        await conn.execute(fix)
        rows = {r["id"]: r for r in await conn.fetch("SELECT id, tools, instructions FROM popagent_agents")}
    assert rows["popagent"]["tools"] == ["getTime", "remember"]
    assert rows["researcher"]["tools"] == ["getTime"]
    assert rows["reviewer"]["tools"] == ["remember", "getTime"]
    for seeded in ("popagent", "researcher"):
        assert "webSearch" not in rows[seeded]["instructions"]
        assert "useBrowserSecret" not in rows[seeded]["instructions"]
    assert "Credentials are never typed into chat or tool arguments." in rows["popagent"]["instructions"]
    assert rows["reviewer"]["instructions"] == "Use webSearch, my way."


async def test_the_web_tool_migration_gives_the_seeded_roles_their_web_tools_back(api_stack: Stack) -> None:
    from popagent_agent_runner.service import MIGRATIONS

    data = MIGRATIONS / "data"
    seed = (data / "0004_seed_agent_roles.sql").read_text()
    drop = (data / "0005_drop_unregistered_tools.sql").read_text()
    add = (data / "0006_add_web_tools.sql").read_text()
    async with rolled_back(api_stack) as conn:
        await conn.execute("DELETE FROM popagent_agents")
        await conn.execute(seed)
        await conn.execute(drop)
        # A user's edit between 0005 and 0006, and one that already lists webSearch.
        await conn.execute("UPDATE popagent_agents SET tools = ARRAY['remember', 'getTime'] WHERE id = 'reviewer'")
        await conn.execute("UPDATE popagent_agents SET tools = ARRAY['webSearch'] WHERE id = 'implementer'")
        await conn.execute(add)
        rows = {r["id"]: r["tools"] for r in await conn.fetch("SELECT id, tools FROM popagent_agents")}
    assert rows == {
        "popagent": ["getTime", "remember", "webSearch"],
        "researcher": ["getTime", "webSearch", "webFetch"],
        "implementer": ["webSearch"],
        "reviewer": ["remember", "getTime", "webSearch"],
    }


SUPERVISOR_DEFAULT_APPROVALS = [
    {"tool": "mastra_workspace_execute_command", "decision": "ask"},
    {"tool": "useBrowserSecret", "decision": "ask"},
]


async def test_a_fresh_supervisor_asks_before_a_command_or_a_secret_fill_and_specialists_ask_nothing(
    client: httpx.AsyncClient,
) -> None:
    policies = {agent_id: agent["toolApproval"] for agent_id, agent in (await agents(client)).items()}
    supervisor = [
        {key: value for key, value in rule.items() if value not in (None, {})} for rule in policies["popagent"]
    ]
    assert supervisor == SUPERVISOR_DEFAULT_APPROVALS
    assert {agent_id: rules for agent_id, rules in policies.items() if agent_id != "popagent"} == {
        "researcher": [],
        "implementer": [],
        "reviewer": [],
    }


async def test_the_approval_seed_keeps_rules_a_user_set(api_stack: Stack) -> None:
    from popagent_agent_runner.service import MIGRATIONS

    seed = (MIGRATIONS / "data" / "0014_seed_supervisor_approvals.sql").read_text()
    mine = '[{"tool": "mastra_workspace_write_file", "decision": "deny"}]'
    async with rolled_back(api_stack) as conn:
        await conn.execute("UPDATE popagent_agents SET tool_approval = $1::jsonb WHERE id = 'popagent'", mine)
        await conn.execute("UPDATE popagent_agents SET tool_approval = '[]' WHERE id = 'reviewer'")
        await conn.execute(seed)
        rows = {
            r["id"]: r["rules"]
            for r in await conn.fetch("SELECT id, tool_approval::text AS rules FROM popagent_agents")
        }
    assert orjson.loads(rows["popagent"]) == orjson.loads(mine)
    assert orjson.loads(rows["reviewer"]) == []


async def test_the_inherit_migration_clears_only_the_seeded_specialist_overrides(api_stack: Stack) -> None:
    """0015 clears the researcher's and reviewer's seeded 9Router override; a user's own choice stays."""
    from popagent_agent_runner.service import MIGRATIONS

    data = MIGRATIONS / "data"
    seed = (data / "0004_seed_agent_roles.sql").read_text()
    inherit = (data / "0015_specialists_inherit_the_default_model.sql").read_text()
    async with rolled_back(api_stack) as conn:
        # The roles as 0004 seeded them, then a user's own override on the reviewer and the implementer.
        await conn.execute("DELETE FROM popagent_agents")
        await conn.execute(seed)
        seeded = {r["id"]: r["model"] for r in await conn.fetch("SELECT id, model FROM popagent_agents")}
        assert seeded["researcher"] == seeded["reviewer"] == "cx/gpt-5.3-codex-spark"
        await conn.execute("UPDATE popagent_agents SET model = 'up/mine' WHERE id IN ('reviewer', 'implementer')")
        await conn.execute(inherit)
        rows = {r["id"]: r["model"] for r in await conn.fetch("SELECT id, model FROM popagent_agents")}
    assert rows == {"popagent": None, "researcher": None, "implementer": "up/mine", "reviewer": "up/mine"}
