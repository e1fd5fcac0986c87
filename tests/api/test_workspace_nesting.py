"""Workspaces over real HTTP: no workspace's folder is, contains or lies inside another's.

An outer workspace's agents could change an inner one's files and `.git`, and swap the
folders above its root while its turns run; so registering or moving a workspace in, around
or onto another is a 409 that says which workspace it collides with.
"""

from __future__ import annotations

import uuid

import httpx

from support.stacks import Stack


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def register(client: httpx.AsyncClient, workspace_id: str, path: str) -> httpx.Response:
    return await client.post("/api/workspaces", json={"id": workspace_id, "name": workspace_id, "path": path})


async def registered(client: httpx.AsyncClient) -> dict[str, str]:
    """id -> path of every registration."""
    return {w["id"]: w["path"] for w in (await client.get("/api/workspaces")).json()["workspaces"]}


async def test_a_workspace_inside_or_around_another_is_refused(client: httpx.AsyncClient, api_stack: Stack) -> None:
    outer = unique("outer")
    (api_stack.workspace_root / outer / "inner" / "deeper").mkdir(parents=True)
    assert (await register(client, outer, outer)).status_code == 201

    refused = [unique("inner"), unique("twin"), unique("around"), unique("docs")]

    inside = await register(client, refused[0], f"{outer}/inner/deeper")
    assert inside.status_code == 409, inside.text
    assert f"is inside the folder of the workspace '{outer}'" in inside.json()["error"]

    same = await register(client, refused[1], f"./{outer}/")
    assert same.status_code == 409, same.text
    assert f"is the folder of the workspace '{outer}'" in same.json()["error"]

    # Around: the new one would contain an existing one.
    holder, held = unique("holder"), unique("held")
    (api_stack.workspace_root / holder / "repo").mkdir(parents=True)
    assert (await register(client, held, f"{holder}/repo")).status_code == 201
    around = await register(client, refused[2], holder)
    assert around.status_code == 409, around.text
    assert f"contains the folder of the workspace '{held}'" in around.json()["error"]

    # The seeded default checkout is a workspace like any other.
    (api_stack.workspace_root / "popagent" / "docs").mkdir(parents=True, exist_ok=True)
    in_default = await register(client, refused[3], "popagent/docs")
    assert in_default.status_code == 409, in_default.text
    assert "is inside the folder of the workspace 'popagent'" in in_default.json()["error"]

    assert set(refused).isdisjoint(await registered(client)), "a refused registration was saved"


async def test_nesting_is_decided_on_real_paths(client: httpx.AsyncClient, api_stack: Stack) -> None:
    """A link inside the root that leads into another workspace is that workspace's folder."""
    outer = unique("real")
    (api_stack.workspace_root / outer / "sub").mkdir(parents=True)
    assert (await register(client, outer, outer)).status_code == 201
    alias = unique("alias")
    (api_stack.workspace_root / alias).symlink_to(api_stack.workspace_root / outer / "sub")
    through_link = await register(client, unique("linked"), alias)
    assert through_link.status_code == 409, through_link.text
    assert f"is inside the folder of the workspace '{outer}'" in through_link.json()["error"]


async def test_moving_a_workspace_into_another_is_refused(client: httpx.AsyncClient, api_stack: Stack) -> None:
    first, second = unique("first"), unique("second")
    for folder in (first, second):
        (api_stack.workspace_root / folder / "src").mkdir(parents=True)
        assert (await register(client, folder, folder)).status_code == 201
    moved = await client.patch(f"/api/workspaces/{second}", json={"path": f"{first}/src"})
    assert moved.status_code == 409, moved.text
    assert f"is inside the folder of the workspace '{first}'" in moved.json()["error"]
    assert (await registered(client))[second] == second
    # Moving within its own folder is no collision.
    own = await client.patch(f"/api/workspaces/{second}", json={"path": f"{second}/src"})
    assert own.status_code == 200, own.text
