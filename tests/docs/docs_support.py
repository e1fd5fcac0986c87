"""What the documentation tests share: their stack, this repository's Markdown as a workspace, waiting for a run."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx

from support.stacks import CHAT_HOOK_PATHS, RERANK_MODEL, StackSpec
from support.waiting import eventually

REPO = Path(__file__).resolve().parents[2]
# One agent-runner worker with a rerank model (the fused order is tested in-process).
DOCS_STACK = StackSpec(
    "docs", CHAT_HOOK_PATHS, frozenset({"gateway"}), runner_settings={"POPAGENT_DOCS_RERANK_MODEL": RERANK_MODEL}
)


def repository_markdown() -> list[str]:
    """This repository's Markdown files as git sees them (tracked, or new and not ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", "*.md"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return sorted(path for path in set(listed) if (REPO / path).is_file())


def copy_repository_markdown(dest: Path) -> list[str]:
    """Copy the repository's Markdown (and its root .gitignore) under `dest`; the paths copied."""
    paths = repository_markdown()
    for path in paths:
        target = dest / path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / path, target)
    shutil.copyfile(REPO / ".gitignore", dest / ".gitignore")
    return paths


async def register_workspace(client: httpx.AsyncClient, workspace_id: str, path: str) -> None:
    response = await client.post("/api/workspaces", json={"id": workspace_id, "name": workspace_id, "path": path})
    assert response.status_code == 201, response.text


async def index_and_wait(client: httpx.AsyncClient, workspace_id: str, **body: Any) -> dict[str, Any]:
    """Start an index run and return its status once it is over (idle or failed)."""
    response = await client.post(f"/api/workspaces/{workspace_id}/documents/index", json=body or None)
    assert response.status_code == 202, response.text
    return await wait_index(client, workspace_id)


async def wait_index(client: httpx.AsyncClient, workspace_id: str) -> dict[str, Any]:
    async def status() -> dict[str, Any]:
        response = await client.get(f"/api/workspaces/{workspace_id}/documents/index")
        assert response.status_code == 200, response.text
        return response.json()

    return await eventually(
        status,
        until=lambda s: s["state"] in ("idle", "failed"),
        within=60,
        interval=0.1,
        what=f"the index run of {workspace_id}",
    )


async def search(client: httpx.AsyncClient, workspace_id: str, query: str, **body: Any) -> dict[str, Any]:
    response = await client.post(f"/api/workspaces/{workspace_id}/documents/search", json={"query": query, **body})
    assert response.status_code == 200, response.text
    return response.json()
