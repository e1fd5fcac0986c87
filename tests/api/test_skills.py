"""Agent Skills over real HTTP: the seeded skills, edits, validation and the SKILL.md round trip."""

from __future__ import annotations

from typing import Any

import httpx

from popagent_agent_runner.state.skills import parse_skill_md

AGENT_IDS = ["popagent", "researcher", "implementer", "reviewer"]
FIELDS = (
    "name",
    "description",
    "instructions",
    "references",
    "sourceUrl",
    "attribution",
    "license",
    "compatibility",
    "metadata",
    "enabled",
)


async def skills_of(client: httpx.AsyncClient, agent_id: str) -> list[dict[str, Any]]:
    response = await client.get(f"/api/agents/{agent_id}/skills")
    assert response.status_code == 200, response.text
    return response.json()["skills"]


async def test_every_agent_is_seeded_with_two_attributed_user_skills(client: httpx.AsyncClient) -> None:
    names = set()
    for agent_id in AGENT_IDS:
        skills = await skills_of(client, agent_id)
        assert len(skills) >= 2
        for skill in skills[:2]:
            assert skill["agentId"] == agent_id
            assert skill["sourceUrl"].startswith("https://")
            assert skill["attribution"].startswith("Written for popagent")
            assert skill["enabled"] is True and skill["evolutionManaged"] is False
            assert len(skill["instructions"]) > 300
            names.add(skill["name"])
    assert {"delegation-brief", "source-verification", "minimal-change", "security-review"} <= names


async def test_create_edit_disable_and_delete_a_skill(client: httpx.AsyncClient) -> None:
    created = await client.post(
        "/api/agents/implementer/skills",
        json={"name": "release-notes", "description": "Write release notes.", "instructions": "List changes."},
    )
    assert created.status_code == 201, created.text
    skill = created.json()
    assert skill["references"] == {} and skill["enabled"] is True
    try:
        duplicate = await client.post(
            "/api/agents/implementer/skills",
            json={"name": "release-notes", "description": "Again.", "instructions": "Again."},
        )
        assert duplicate.status_code == 409
        assert "release-notes" in duplicate.json()["error"]

        patched = await client.patch(
            f"/api/agents/implementer/skills/{skill['id']}",
            json={"enabled": False, "references": {"references/format.md": "# Format"}},
        )
        assert patched.status_code == 200, patched.text
        assert patched.json()["enabled"] is False
        assert patched.json()["references"] == {"references/format.md": "# Format"}
        assert patched.json()["instructions"] == "List changes."
        listed = {s["id"]: s for s in await skills_of(client, "implementer")}
        assert listed[skill["id"]]["enabled"] is False

        # Another agent's id path does not reach this skill.
        assert (
            await client.patch(f"/api/agents/reviewer/skills/{skill['id']}", json={"enabled": True})
        ).status_code == 404
    finally:
        assert (await client.delete(f"/api/agents/implementer/skills/{skill['id']}")).status_code == 204
    assert (await client.delete(f"/api/agents/implementer/skills/{skill['id']}")).status_code == 404
    assert skill["id"] not in {s["id"] for s in await skills_of(client, "implementer")}


async def test_names_and_descriptions_follow_the_agent_skills_rules(client: httpx.AsyncClient) -> None:
    for name in ("Bad", "double--hyphen", "-edge", "x" * 65, "under_score"):
        response = await client.post(
            "/api/agents/reviewer/skills", json={"name": name, "description": "d", "instructions": "i"}
        )
        assert response.status_code == 422, name
    too_long = await client.post(
        "/api/agents/reviewer/skills", json={"name": "ok", "description": "d" * 1025, "instructions": "i"}
    )
    assert too_long.status_code == 422
    unknown_agent = await client.post(
        "/api/agents/nobody/skills", json={"name": "ok", "description": "d", "instructions": "i"}
    )
    assert unknown_agent.status_code == 404
    bad_md = await client.post("/api/agents/reviewer/skills", json={"skillMd": "no front matter"})
    assert bad_md.status_code == 400
    unknown_key = await client.post(
        "/api/agents/reviewer/skills", json={"skillMd": "---\nname: x\ndescription: y\nversion: 2\n---\nbody"}
    )
    assert unknown_key.status_code == 400 and "version" in unknown_key.json()["error"]


async def test_a_skill_md_round_trip_keeps_every_field(client: httpx.AsyncClient) -> None:
    original = {
        "name": "incident-notes",
        "description": "Keep incident notes: timeline, impact, cause.\nUse it during an outage.",
        "instructions": "# Incident notes\n\n1. Timeline first.\n2. Impact: users, duration.\n\nKey: value: 'quoted'\n",
        "references": {"references/template.md": "# Template\n\n- when:\n- what:\n", "notes.txt": "plain"},
        "sourceUrl": "https://example.org/skills/incident-notes",
        "attribution": "Written for the test: a colon: and 'quotes'.",
        "license": "Apache-2.0",
        "compatibility": "Needs a workspace.",
        "metadata": {"author": "tests", "version": "1.0"},
        "enabled": False,
    }
    created = await client.post("/api/agents/researcher/skills", json=original)
    assert created.status_code == 201, created.text
    exported = created.json()["skillMd"]
    assert exported.startswith("---\nname: incident-notes\n")
    await client.delete(f"/api/agents/researcher/skills/{created.json()['id']}")

    imported = await client.post("/api/agents/researcher/skills", json={"skillMd": exported})
    assert imported.status_code == 201, imported.text
    try:
        assert {key: imported.json()[key] for key in FIELDS} == original
        assert imported.json()["skillMd"] == exported
    finally:
        await client.delete(f"/api/agents/researcher/skills/{imported.json()['id']}")


def test_a_skill_md_from_the_ecosystem_parses() -> None:
    fields = parse_skill_md(
        "---\nname: pdf-processing\ndescription: Extract text and tables from PDF files.\nlicense: MIT\n"
        "allowed-tools: Bash(python:*) Read\nmetadata:\n  author: example-org\n  version: 1.0\n---\n# PDF\n\nSteps.\n"
    )
    assert fields.name == "pdf-processing" and fields.license == "MIT"
    assert fields.metadata == {"author": "example-org", "version": "1.0", "allowed-tools": "Bash(python:*) Read"}
    assert fields.instructions == "# PDF\n\nSteps.\n" and fields.enabled is True and fields.references == {}


def _alias_bomb(levels: int) -> str:
    """Billion laughs: each level a list of nine aliases of the one before (9^levels strings)."""
    lines = ['  l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in range(1, levels):
        lines.append(f"  l{level}: &l{level} [{','.join([f'*l{level - 1}'] * 9)}]")
    return "---\nname: bomb\ndescription: d\nmetadata:\n" + "\n".join(lines) + "\n---\nbody"


async def test_skill_md_front_matter_refuses_aliases_and_deep_nesting(client: httpx.AsyncClient) -> None:
    # A few hundred bytes that YAML aliases make 9^8 strings: a worker held for seconds and
    # hundreds of MB (9^9: 30 s, 680 MB) before aliases were refused.
    bomb = _alias_bomb(8)
    assert len(bomb) < 600
    refused = await client.post("/api/agents/reviewer/skills", json={"skillMd": bomb}, timeout=30)
    assert refused.status_code == 400, refused.text
    assert "anchors and aliases (& and *) are not accepted" in refused.json()["error"]
    # The composer recurses: 5,000 nested lists were a RecursionError (an internal error).
    deep = "---\nname: deep\ndescription: d\nmetadata: " + "[" * 5000 + "]" * 5000 + "\n---\nbody"
    nested = await client.post("/api/agents/reviewer/skills", json={"skillMd": deep})
    assert nested.status_code == 400, nested.text
    assert "nested more than" in nested.json()["error"]
    assert not [s for s in await skills_of(client, "reviewer") if s["name"] in ("bomb", "deep")]
