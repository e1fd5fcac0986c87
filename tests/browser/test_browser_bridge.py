"""The browser's access, settings, routes and connection: a read-only specialist's click is refused
by the bridge; a disabled browser leaves the tools out of the next run; takeover pauses the agent;
the routes answer from the live server; a bad socket is named in the error and in health; the
server killed and restarted mid-session is reconnected to."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import uuid
from collections.abc import AsyncIterator

import grpc
import pytest
from chat.helpers import chat, new_session

from browser.helpers import bridge
from popagent.tasks.v1 import tasks_pb2 as tpb
from support.browser_peer import BrowserPeer, LoginSite
from support.git_fixtures import git_workspace, self_update_task
from support.model_gateway import ToolCall, Turn
from support.stacks import Stack
from support.waiting import eventually

# One browser server (node + chromium, ~0.5 GB) for the whole browser suite: keep it on one worker.
pytestmark = pytest.mark.xdist_group("browser")


NAV = "bifrostNavigator"


def _tool_names(request: dict[str, object]) -> list[str]:
    return [tool["function"]["name"] for tool in request.get("tools", [])]  # type: ignore[index,union-attr]


async def test_a_read_only_specialist_s_click_is_refused_by_the_bridge(stack: Stack, site: LoginSite) -> None:
    stack.models.push(
        Turn.call(ToolCall("researcher", {"brief": "click sign in"}, id="c-d")),
        Turn.call(ToolCall(NAV, {"operation": "browser_navigate", "arguments": {"url": site.url("/login")}}, id="c-n")),
        Turn.call(ToolCall(NAV, {"operation": "browser_click", "arguments": {"target": "e2"}}, id="c-c")),
        Turn.say("I may not click."),
        Turn.say("The researcher could not click.", chunk_size=100),
    )
    async with stack.client() as client:
        session = await new_session(client)
        await chat(client, session, "sign in")
    # The researcher has read-only browser access (seeded): navigate works, the click does not.
    researcher_tools = _tool_names(stack.models.requests[1])
    assert NAV in researcher_tools and "useBrowserSecret" not in researcher_tools
    refusal = stack.models.requests[3]["messages"][-1]["content"]
    assert "browser_click needs interactive browser access; this agent's access is read-only" in refusal
    navigated = stack.models.requests[2]["messages"][-1]["content"]
    assert "Page URL: https://login.test" in navigated


async def test_a_disabled_browser_is_absent_from_the_next_run_and_refused_at_the_bridge(stack: Stack) -> None:
    async with stack.client() as client:
        session = await new_session(client)
        stack.models.push(Turn.say("on"))
        await chat(client, session, "hi")
        assert {NAV, "useBrowserSecret"} <= set(_tool_names(stack.models.requests[-1]))
        (await client.patch("/api/settings/browser", json={"enabled": False})).raise_for_status()
        stack.models.push(Turn.say("off"))
        await chat(client, session, "hi again")
        assert not {NAV, "useBrowserSecret"} & set(_tool_names(stack.models.requests[-1]))
        health = (await client.get("/api/browser/health")).json()
    assert health["enabled"] is False
    async with bridge(stack, session) as b:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await b.op("browser_snapshot")
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "disabled in browser settings" in (refused.value.details() or "")


async def test_the_routes_show_health_sessions_screenshots_and_takeover(stack: Stack, site: LoginSite) -> None:
    async with stack.client() as client:
        session = await new_session(client)
        async with bridge(stack, session) as b:
            await b.op("browser_navigate", url=site.url("/login"))
            health = (await client.get("/api/browser/health")).json()
            assert health["reachable"] is True and health["serverName"] == "Playwright"
            assert health["toolCount"] >= 20 and health["lastError"] == ""
            listed = (await client.get("/api/browser/sessions")).json()["sessions"]
            assert {"sessionId": session, "takenOver": False, "profile": None} in listed
            shot = await client.get(f"/api/browser/sessions/{session}/screenshot")
            assert shot.status_code == 200 and shot.headers["content-type"] == "image/png"
            assert shot.content.startswith(b"\x89PNG")

            held = await client.post(f"/api/browser/sessions/{session}/takeover")
            assert held.json() == {"sessionId": session, "takenOver": True, "profile": None}
            with pytest.raises(grpc.aio.AioRpcError) as paused:
                await b.op("browser_snapshot")
            assert "the user has taken over this browser session" in (paused.value.details() or "")
            released = await client.delete(f"/api/browser/sessions/{session}/takeover")
            assert released.json() == {"sessionId": session, "takenOver": False, "profile": None}
            assert "Sign in" in await b.text("browser_snapshot")

            # Served for real (tests/browser/test_browser_profiles.py has the rest).
            assert (await client.get("/api/browser/profiles")).status_code == 200
            recording = (await client.get(f"/api/browser/sessions/{session}/recordings")).json()
            assert recording["frames"][0]["operation"] == "browser_navigate"
            assert (await client.get("/api/browser/health", headers={"x-popagent-key": "wrong"})).status_code == 401

            # Deleting the chat session closes its tab (CloseSession, best effort, is wired).
            assert (await client.delete(f"/api/sessions/{session}")).status_code in (200, 204)
            listed = (await client.get("/api/browser/sessions")).json()["sessions"]
            assert session not in [s["sessionId"] for s in listed]


@contextlib.asynccontextmanager
async def _socket_mode(peer: BrowserPeer, mode: int) -> AsyncIterator[None]:
    os.chmod(peer.socket_path, mode)
    try:
        yield
    finally:
        os.chmod(peer.socket_path, 0o600)


async def test_a_bad_socket_is_named_and_a_restarted_server_is_reconnected(
    stack: Stack, peer: BrowserPeer, site: LoginSite
) -> None:
    session = f"reconnect-{uuid.uuid4().hex[:8]}"
    async with stack.client() as client, bridge(stack, session) as b:
        await b.op("browser_navigate", url=site.url("/login"))
        async with _socket_mode(peer, 0o666):
            await peer.restart()
            # The old session is gone with the old server: the next call finds out and reconnects,
            # which the socket's mode now refuses.
            with pytest.raises(grpc.aio.AioRpcError) as failed:
                await b.op("browser_snapshot")
            assert failed.value.code() == grpc.StatusCode.UNAVAILABLE
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await b.op("browser_snapshot")
            assert f"browser socket {peer.socket_path} is group- or world-writable (mode 0666)" in (
                refused.value.details() or ""
            )
            health = (await client.get("/api/browser/health")).json()
            assert health["reachable"] is False and "mode 0666" in health["lastError"]
        moved = peer.socket_path.with_suffix(".away")
        os.rename(peer.socket_path, moved)
        try:
            with pytest.raises(grpc.aio.AioRpcError) as missing:
                await b.op("browser_snapshot")
            assert f"browser socket {peer.socket_path} does not exist" in (missing.value.details() or "")
        finally:
            os.rename(moved, peer.socket_path)
        # Back to 0600 and in place: the bridge reconnects and the next call works.
        await b.op("browser_navigate", url=site.url("/login"))
        assert "Sign in" in await b.text("browser_snapshot")

        async def healthy() -> bool:
            return (await client.get("/api/browser/health")).json()["reachable"] is True

        await eventually(healthy)


async def test_code_execution_needs_the_setting_and_interactive_access(stack: Stack, site: LoginSite) -> None:
    code = {"code": "async (page) => { return await page.title(); }"}
    async with stack.client() as client, bridge(stack, f"code-{uuid.uuid4().hex[:8]}") as b:
        await b.op("browser_navigate", url=site.url("/login"))
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await b.op("browser_run_code_unsafe", **code)
        assert "browser settings do not allow code execution" in (refused.value.details() or "")
        allowed = await client.patch("/api/settings/browser", json={"allowCodeExecution": True})
        assert allowed.json()["allowCodeExecution"] is True and allowed.json()["enabled"] is True
        try:
            with pytest.raises(grpc.aio.AioRpcError) as read_only:
                await b.op("browser_run_code_unsafe", access="read-only", **code)
            assert "needs interactive browser access" in (read_only.value.details() or "")
            assert "Sign in" in await b.text("browser_run_code_unsafe", **code)
        finally:
            await client.patch("/api/settings/browser", json={"allowCodeExecution": False})


async def test_a_patch_that_disables_the_browser_refuses_the_call_in_flight(stack: Stack, site: LoginSite) -> None:
    async with stack.client() as client, bridge(stack, f"inflight-{uuid.uuid4().hex[:8]}") as b:
        await b.op("browser_navigate", url=site.url("/login"))
        waiting = asyncio.ensure_future(b.op("browser_wait_for", time=2))
        await asyncio.sleep(0.5)
        assert not waiting.done()
        (await client.patch("/api/settings/browser", json={"enabled": False})).raise_for_status()
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await waiting
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "disabled in browser settings" in (refused.value.details() or "")


async def test_a_tasks_browser_tab_is_closed_when_the_task_ends(stack: Stack, site: LoginSite) -> None:
    """The tasks service's browser-close observer: the tab a task's turn opened is gone once the task
    is done, while a chat session's tab stays open past its turn."""
    stack.models.push(
        Turn.call(ToolCall(NAV, {"operation": "browser_navigate", "arguments": {"url": site.url("/login")}}, id="t-n")),
        Turn.say("Visited."),
    )
    task_id = await stack.create_task("visit the login page")
    task = await stack.wait_task(task_id, "completed", "failed", "dead-letter")
    assert task.status == "completed", task
    [result] = [m["content"] for m in stack.models.requests[-1]["messages"] if m["role"] == "tool"]
    assert "Page URL: " + site.url("/login") in result
    async with stack.client() as client:

        async def browser_sessions() -> list[str]:
            listed = await client.get("/api/browser/sessions")
            assert listed.status_code == 200, listed.text
            return [s["sessionId"] for s in listed.json()["sessions"]]

        await eventually(browser_sessions, until=lambda ids: f"task-{task_id}" not in ids, what="the task's tab closed")
        # A chat turn's tab outlives the turn (the user may look at it, or take over).
        session = await new_session(client)
        stack.models.push(
            Turn.call(
                ToolCall(NAV, {"operation": "browser_navigate", "arguments": {"url": site.url("/login")}}, id="c-n")
            ),
            Turn.say("Visited."),
        )
        await chat(client, session, "visit the login page")
        assert session in await browser_sessions()
        assert (await client.delete(f"/api/browser/sessions/{session}")).status_code in (200, 204)


async def test_a_trusted_self_update_turn_gets_no_browser_tools(stack: Stack) -> None:
    stack.models.push(Turn.say("user task done"), Turn.say("self-update done"))
    task_id = await stack.create_task("a user task")
    task = await stack.wait_task(task_id, "completed", "failed", "dead-letter")
    assert task.status == "completed", task
    # Contained self-update runs only in a Git repository, and an answer without the implementer's
    # and the reviewer's delegations cannot complete it; its turn still reached the model.
    workspace_id = await git_workspace(stack)
    task_id = await self_update_task(stack, "a self-update task", workspace_id, max_attempts=1)
    task = await stack.wait_task(task_id, "completed", "failed", "dead-letter")
    assert (task.status, task.last_error_class) == ("failed", "containment"), task
    user_tools, self_update_tools = (set(_tool_names(request)) for request in stack.models.requests[:2])
    # Its remediation is contained work too; it ends before the next test scripts the model.
    listed = await stack.tasks.ListTasks(tpb.ListTasksRequest(workspace_id=workspace_id))
    for remediation in [t for t in listed.tasks if t.parent_task_id == task_id]:
        await stack.wait_task(remediation.id, "completed", "failed", "dead-letter", "cancelled")
    assert {NAV, "useBrowserSecret"} <= user_tools
    assert not {NAV, "useBrowserSecret"} & self_update_tools


async def test_the_user_s_input_reaches_a_held_page_and_a_closed_tab_answers_404(stack: Stack, site: LoginSite) -> None:
    """The panel's takeover: a click at a point of the screenshot focuses the field there, typed text
    and a key land in it; without takeover the input is refused (409); once the tab is gone the
    screenshot and the input answer 404 saying so, not that a service is down."""
    session = f"input-{uuid.uuid4().hex[:8]}"
    field = "() => JSON.stringify(document.querySelector('#user').getBoundingClientRect())"
    async with stack.client() as client, bridge(stack, session) as b:
        await b.op("browser_navigate", url=site.url("/login"))
        box = json.loads(
            json.loads((await b.text("browser_evaluate", function=field)).split("### Result")[1].split("###")[0])
        )
        click = {"click": {"x": box["x"] + 5, "y": box["y"] + box["height"] / 2}}
        route = f"/api/browser/sessions/{session}/input"
        refused = await client.post(route, json=click)
        assert refused.status_code == 409 and "take over this browser session first" in refused.json()["error"]
        assert (await client.post(f"/api/browser/sessions/{session}/takeover")).status_code == 200
        assert (await client.post(route, json=click)).status_code == 204
        assert (await client.post(route, json={"text": "ada"})).status_code == 204
        assert (await client.post(route, json={"key": "Backspace"})).status_code == 204
        assert (await client.post(route, json={"text": "m"})).status_code == 204
        both = await client.post(route, json={"text": "x", "key": "Enter"})
        assert both.status_code == 422
        assert (await client.post(route, json={"key": "Enter; rm"})).status_code == 422
        assert (await client.delete(f"/api/browser/sessions/{session}/takeover")).status_code == 200
        typed = await b.text("browser_evaluate", function="() => document.querySelector('#user').value")
        assert '"adm"' in typed

        assert (await client.delete(f"/api/browser/sessions/{session}")).json() == {"closed": True}
        shot = await client.get(f"/api/browser/sessions/{session}/screenshot")
        assert shot.status_code == 404, shot.text
        assert "has no browser tab now: it was closed, or the browser restarted" in shot.json()["error"]
        assert (await client.post(f"/api/browser/sessions/{session}/takeover")).status_code == 200
        gone = await client.post(route, json=click)
        assert gone.status_code == 404 and "has no browser tab now" in gone.json()["error"]
        await client.delete(f"/api/browser/sessions/{session}/takeover")
