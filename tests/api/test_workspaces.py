"""Workspaces over real HTTP: registration, containment under POPAGENT_WORKSPACE_ROOT,
update, delete rules, and workspace-wide session deletion."""

from __future__ import annotations

import os
import uuid
from typing import Any

import httpx
import pytest

from support.stacks import SESSION_END_PATH, Stack


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def test_the_default_workspace_is_seeded_first(client: httpx.AsyncClient) -> None:
    workspaces = (await client.get("/api/workspaces")).json()["workspaces"]
    default = workspaces[0]
    assert default["id"] == "popagent"
    assert default["path"] == "popagent"
    assert default["isDefault"] is True
    assert default["exists"] is True


async def test_register_update_and_delete_a_contained_repository(client: httpx.AsyncClient, api_stack: Stack) -> None:
    folder = unique("repo")
    (api_stack.workspace_root / folder / "src").mkdir(parents=True)
    created = await client.post("/api/workspaces", json={"name": f"Repo {folder}", "path": f"./{folder}//"})
    assert created.status_code == 201, created.text
    workspace = created.json()
    assert workspace["id"] == f"repo-{folder}"
    assert workspace["path"] == folder
    assert workspace["exists"] is True and workspace["isDefault"] is False
    assert workspace["id"] in {w["id"] for w in (await client.get("/api/workspaces")).json()["workspaces"]}

    updated = await client.patch(
        f"/api/workspaces/{workspace['id']}", json={"path": f"{folder}/src", "description": "sources"}
    )
    assert updated.status_code == 200, updated.text
    assert updated.json()["path"] == f"{folder}/src"
    assert updated.json()["name"] == workspace["name"]
    assert updated.json()["description"] == "sources"

    moved = await client.patch(f"/api/workspaces/{workspace['id']}", json={"path": f"{folder}/not-cloned-yet"})
    assert moved.status_code == 200
    assert moved.json()["exists"] is False

    assert (await client.delete(f"/api/workspaces/{workspace['id']}")).status_code == 204
    assert (await client.patch(f"/api/workspaces/{workspace['id']}", json={"name": "x"})).status_code == 404
    assert (await client.delete(f"/api/workspaces/{workspace['id']}")).status_code == 404


@pytest.mark.parametrize(
    "path",
    [
        "..",
        "../outside",
        "popagent/../../outside",
        "/etc",
        "/",
        ".",
        "./",
        "../workspace-evil",
        "a\\..\\..\\b",
        "line\nbreak",
    ],
)
async def test_paths_outside_the_root_are_refused(client: httpx.AsyncClient, path: str) -> None:
    response = await client.post("/api/workspaces", json={"name": unique("evil"), "path": path})
    # The document's path pattern says each of these is no relative path, so the gateway refuses it.
    assert response.status_code == 422, response.text
    assert [detail["loc"] for detail in response.json()["details"]] == [["body", "path"]]


async def test_symlinks_are_resolved_and_compared_by_components(client: httpx.AsyncClient, api_stack: Stack) -> None:
    root = api_stack.workspace_root
    # A sibling whose name extends the root's: a string-prefix check would accept it.
    sibling = root.parent / f"{root.name}-evil"
    sibling.mkdir(exist_ok=True)
    escape = unique("escape")
    os.symlink(sibling, root / escape)
    chained = unique("chain")
    os.symlink(root / escape, root / chained)
    inside = unique("inside")
    (root / f"{inside}-target").mkdir()
    os.symlink(root / f"{inside}-target", root / inside)
    for path in (escape, f"{escape}/deeper", chained):
        refused = await client.post("/api/workspaces", json={"name": unique("link"), "path": path})
        assert refused.status_code == 400, (path, refused.text)
    allowed = await client.post("/api/workspaces", json={"name": unique("link"), "path": inside})
    assert allowed.status_code == 201, allowed.text
    assert allowed.json()["exists"] is True
    bad_update = await client.patch(f"/api/workspaces/{allowed.json()['id']}", json={"path": escape})
    assert bad_update.status_code == 400


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"path": "x"}, "name"),
        ({"name": "x"}, "path"),
        ({"name": "", "path": "x"}, "name"),
        ({"name": "x", "path": ""}, "path"),
        ({"name": "x", "path": "x" * 1025}, "path"),
        ({"name": "x", "path": "x", "id": "Bad_Id"}, "id"),
        ({"name": "x", "path": "x", "owner": "me"}, "owner"),
        ({"name": 5, "path": "x"}, "name"),
    ],
)
async def test_invalid_registrations_are_refused_with_the_field_named(
    client: httpx.AsyncClient, body: dict[str, Any], field: str
) -> None:
    response = await client.post("/api/workspaces", json=body)
    assert response.status_code == 422, response.text
    assert any(detail["loc"][-1] == field for detail in response.json()["details"])


async def test_duplicate_ids_conflict(client: httpx.AsyncClient, api_stack: Stack) -> None:
    folder = unique("dup")
    (api_stack.workspace_root / folder).mkdir()
    body = {"id": folder, "name": folder, "path": folder}
    assert (await client.post("/api/workspaces", json=body)).status_code == 201
    assert (await client.post("/api/workspaces", json=body)).status_code == 409


async def test_the_default_and_workspaces_in_use_cannot_be_deleted(client: httpx.AsyncClient, api_stack: Stack) -> None:
    assert (await client.delete("/api/workspaces/popagent")).status_code == 409
    folder = unique("busy")
    (api_stack.workspace_root / folder).mkdir()
    assert (
        await client.post("/api/workspaces", json={"id": folder, "name": folder, "path": folder})
    ).status_code == 201
    assert (await client.post("/api/sessions", json={"workspaceId": folder})).status_code == 201
    busy = await client.delete(f"/api/workspaces/{folder}")
    assert busy.status_code == 409
    assert "session" in busy.json()["error"]


async def test_workspace_session_deletion_removes_active_and_archived_chats_only_there(
    client: httpx.AsyncClient, api_stack: Stack
) -> None:
    folder = unique("wipe")
    (api_stack.workspace_root / folder).mkdir()
    assert (
        await client.post("/api/workspaces", json={"id": folder, "name": folder, "path": folder})
    ).status_code == 201
    ids = [(await client.post("/api/sessions", json={"workspaceId": folder})).json()["id"] for _ in range(5)]
    assert (await client.patch(f"/api/sessions/{ids[0]}", json={"archived": True})).status_code == 200
    # A deletion that stopped half-way (marked, hidden) is finished too.
    async with api_stack.db("agent_runner") as conn:
        await conn.execute("UPDATE popagent_sessions SET deleting_at = now() WHERE id = $1", ids[1])
    bystander = (await client.post("/api/sessions", json={})).json()["id"]
    before = len(api_stack.receiver.requests_for(SESSION_END_PATH))

    response = await client.delete(f"/api/workspaces/{folder}/sessions")
    assert response.status_code == 200, response.text
    assert response.json() == {"deleted": 5}

    ended = {r.json()["sessionId"] for r in api_stack.receiver.requests_for(SESSION_END_PATH)[before:]}
    assert set(ids) <= ended
    assert bystander not in ended
    for archived in ("false", "true"):
        listed = (await client.get("/api/sessions", params={"workspaceId": folder, "archived": archived})).json()
        assert listed["sessions"] == []
    assert (await client.get(f"/api/sessions/{bystander}")).status_code == 200
    # Now the workspace is unused and can go.
    assert (await client.delete(f"/api/workspaces/{folder}")).status_code == 204
    assert (await client.delete(f"/api/workspaces/{folder}/sessions")).status_code == 404


@pytest.mark.parametrize(
    "path",
    [
        "x" * 256,
        f"ok/{'y' * 256}/deeper",
        "é" * 128,  # 128 characters, 256 bytes
        # 1,023 characters, 16 components of 252 bytes each: each fine, the whole over PATH_MAX on disk.
        "/".join(["\N{GRINNING FACE}" * 63] * 16),
    ],
)
async def test_paths_no_file_system_takes_are_refused_before_they_are_saved(
    client: httpx.AsyncClient, api_stack: Stack, path: str
) -> None:
    """Issue 23, finding 4: a 256-character component answered 500 and was saved anyway.

    The document's path pattern refuses the over-long components at the gateway (422); the
    path over PATH_MAX on disk depends on the workspace root, so agent-runner refuses it (400)."""
    name = unique("long")
    response = await client.post("/api/workspaces", json={"name": name, "path": path})
    if len(path) < 1000:
        assert response.status_code == 422, response.text
        assert [detail["loc"] for detail in response.json()["details"]] == [["body", "path"]]
    else:
        assert response.status_code == 400, response.text
        assert "path" in response.json()["error"]
    listed = await client.get("/api/workspaces")
    assert listed.status_code == 200
    assert name not in {workspace["name"] for workspace in listed.json()["workspaces"]}


async def test_the_listing_survives_a_row_no_file_system_call_takes(
    client: httpx.AsyncClient, api_stack: Stack
) -> None:
    """A row saved before paths were checked (or written around the API) is listed as missing,
    so its id can be found and the row fixed or deleted."""
    workspace_id = unique("broken")
    async with api_stack.db() as db:
        await db.execute(
            "INSERT INTO popagent_agent_workspaces (id, name, path, description) VALUES ($1, $2, $3, '')",
            workspace_id,
            workspace_id,
            "x" * 300,
        )
    listed = await client.get("/api/workspaces")
    assert listed.status_code == 200, listed.text
    (broken,) = [workspace for workspace in listed.json()["workspaces"] if workspace["id"] == workspace_id]
    assert broken["exists"] is False
    fixed = await client.patch(f"/api/workspaces/{workspace_id}", json={"path": unique("fixed")})
    assert fixed.status_code == 200, fixed.text
    assert (await client.delete(f"/api/workspaces/{workspace_id}")).status_code == 204
