"""What the approval tests share (tests/chat/test_approvals.py, test_approvals_ai5.py): a supervisor
policy for a block, a workspace session of its own, a turn in the background as its client sees it,
the pending approvals of a session and an answer."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

from chat.helpers import chat, new_workspace_session
from support.sse import read_sse
from support.stacks import Stack
from support.waiting import eventually


@contextlib.asynccontextmanager
async def supervisor_policy(client: httpx.AsyncClient, rules: list[dict[str, Any]]) -> AsyncIterator[None]:
    changed = await client.patch("/api/agents/popagent", json={"toolApproval": rules})
    assert changed.status_code == 200, changed.text
    stored = changed.json()["toolApproval"]
    assert [{key: value for key, value in rule.items() if value not in (None, {})} for rule in stored] == rules
    try:
        yield
    finally:
        restored = await client.patch("/api/agents/popagent", json={"toolApproval": []})
        assert restored.status_code == 200, restored.text


async def workspace(stack: Stack, client: httpx.AsyncClient) -> tuple[str, Path]:
    name = f"repo-{uuid.uuid4().hex[:8]}"
    folder = stack.workspace_root / name
    folder.mkdir()
    return await new_workspace_session(client, name, "approvals"), folder


async def pending(client: httpx.AsyncClient, session: str, count: int = 1) -> list[dict[str, Any]]:
    async def listed() -> list[dict[str, Any]]:
        response = await client.get("/api/approvals", params={"state": "pending", "sessionId": session})
        assert response.status_code == 200, response.text
        return list(response.json()["approvals"])

    return await eventually(listed, until=lambda found: len(found) >= count, what="a pending approval")


async def answer_approval(
    client: httpx.AsyncClient, approval_id: str, decision: str, reason: str = ""
) -> dict[str, Any]:
    body = {"decision": decision, **({"reason": reason} if reason else {})}
    response = await client.post(f"/api/approvals/{approval_id}", json=body)
    assert response.status_code == 200, response.text
    return dict(response.json())


def paused(chunks: list[Any]) -> bool:
    """The stream ended where its turn waits for an approval (docs/approvals.md)."""
    return (
        len(chunks) >= 2
        and chunks[-1] == "[DONE]"
        and chunks[-2]["type"] == "finish"
        and chunks[-2].get("messageMetadata", {}).get("awaitingApproval") is True
    )


async def turn_as_seen(client: httpx.AsyncClient, session: str, text: str) -> list[Any]:
    """A turn as a client sees it: its POST stream, which ends where the turn waits for an approval;
    then, once nothing waits, the turn followed from its first chunk to its end."""
    first = await chat(client, session, text)
    if not paused(first):
        return first

    async def waiting() -> bool:
        listed = await client.get("/api/approvals", params={"state": "pending", "sessionId": session})
        return bool(listed.json()["approvals"])

    await eventually(waiting, until=lambda still: not still, within=60, what="the approval to be answered")
    async with client.stream("GET", f"/api/chat/{session}/stream") as response:
        assert response.status_code == 200, "the turn ended before it was followed"
        return await read_sse(response)


@contextlib.asynccontextmanager
async def chatting(client: httpx.AsyncClient, session: str, text: str = "go") -> AsyncIterator[asyncio.Task[list[Any]]]:
    """A chat turn in the background; the task's result is the turn as its client sees it (`turn_as_seen`)."""
    running = asyncio.create_task(turn_as_seen(client, session, text))
    try:
        yield running
    finally:
        if not running.done():
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await running
