"""The observers that follow a task's end, over the real stack (tasks, agent-runner, browser-bridge
against the real browser server, gateway): the browser-close observer closes the tabs a task's
turn opened once the task completed or failed; an observer that raises (one more observer in the
service's list, as the stack's spec adds it) changes nothing durable, and the observers after it
still run."""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from chat.helpers import supervisor_asks_nothing

from popagent.tasks.v1 import tasks_pb2 as tpb
from support.browser_peer import BrowserPeer, LoginSite, browser_peer
from support.git_fixtures import git_workspace, self_update_task
from support.model_gateway import ToolCall, Turn
from support.stacks import TASK_HOOK_PATHS, TASK_RUNTIME, Stack, StackSpec
from support.waiting import TEST_WITH_A_START_S, eventually
from tasks.harness import Recorder

# One browser server per worker: keep these beside the browser suite's. The first test's setup starts
# a browser server and a stack: its timeout allows a start on a loaded machine.
pytestmark = [pytest.mark.xdist_group("browser"), pytest.mark.timeout(TEST_WITH_A_START_S)]

NAV = "bifrostNavigator"
TERMINAL = ("completed", "failed", "dead-letter", "cancelled")
# Short: a Unix socket path must fit in 108 bytes.
BASE = Path(tempfile.mkdtemp(prefix="pa-tobs-"))

# Run after the service's own observers (hooks, browser-close): the first raises when armed, the
# second records, so a raise that stopped the fan-out would leave it without the event.
RAISING = Recorder()
RECORDING = Recorder()
OBSERVED_STACK = StackSpec(
    "task_observers",
    TASK_HOOK_PATHS,
    frozenset({"secrets", "browser-bridge", "tasks", "gateway"}),
    runtime=TASK_RUNTIME,
    bridge_env={"POPAGENT_BROWSER_SOCKET": str(BASE / "bifrost.sock"), "POPAGENT_BROWSER_CONNECT_WAIT_S": "3"},
    task_observers=(RAISING, RECORDING),
)


@pytest.fixture(scope="module")
async def site() -> AsyncIterator[LoginSite]:
    async with LoginSite() as running:
        yield running


@pytest.fixture(scope="module")
async def peer() -> AsyncIterator[BrowserPeer]:
    async with browser_peer(BASE) as running:
        yield running


@pytest.fixture
async def stack(peer: BrowserPeer, started_stack: Callable[[StackSpec], Awaitable[Stack]]) -> Stack:
    observed = await started_stack(OBSERVED_STACK)
    observed.reset()
    RAISING.fail = False
    RAISING.events.clear()
    RECORDING.events.clear()
    async with observed.client() as client:
        (await client.patch("/api/settings/browser", json={"enabled": True})).raise_for_status()
        await supervisor_asks_nothing(client)
    return observed


async def browser_sessions(stack: Stack) -> list[str]:
    async with stack.client() as client:
        listed = await client.get("/api/browser/sessions")
    assert listed.status_code == 200, listed.text
    return [session["sessionId"] for session in listed.json()["sessions"]]


def tool_results(stack: Stack) -> list[str]:
    return [m["content"] for r in stack.models.requests for m in r["messages"] if m["role"] == "tool"]


async def settled_remediation(stack: Stack, task_id: str, workspace_id: str = "popagent") -> tpb.Task:
    """The remediation a failed task queues, once it has ended (so no later test sees its turn)."""
    listed = await stack.tasks.ListTasks(tpb.ListTasksRequest(workspace_id=workspace_id))
    [remediation] = [t for t in listed.tasks if t.parent_task_id == task_id]
    return await stack.wait_task(remediation.id, *TERMINAL)


async def run_browsing_task(stack: Stack, site: LoginSite, then: Turn) -> tpb.Task:
    """A task whose turn opens a tab on the login page, then answers `then`; the task once it ended
    (its TaskStop observers have run). The tab was open while the turn ran. A failed task's
    remediation runs (and answers) before this returns."""
    stack.models.push(
        Turn.call(ToolCall(NAV, {"operation": "browser_navigate", "arguments": {"url": site.url("/login")}}, id="n")),
        then,
        Turn.say("Looked into it."),
    )
    task_id = await stack.create_task("visit the login page")
    task = await stack.wait_task(task_id, *TERMINAL)
    results = tool_results(stack)
    assert any("Page URL: " + site.url("/login") in result for result in results), (task, results)
    if task.status == "failed":
        await settled_remediation(stack, task_id)
    stack.models.reset()
    return task


async def assert_tabs_closed(stack: Stack, task: tpb.Task) -> None:
    assert task.thread_id == f"task-{task.id}"

    async def open_sessions() -> list[str]:
        return await browser_sessions(stack)

    await eventually(open_sessions, until=lambda ids: task.thread_id not in ids, what="the task's tabs closed")


async def test_a_tasks_tabs_are_closed_after_it_completes_and_after_it_fails(stack: Stack, site: LoginSite) -> None:
    completed = await run_browsing_task(stack, site, Turn.say("Visited."))
    assert completed.status == "completed", completed
    await assert_tabs_closed(stack, completed)

    # A user task fails for good on a model error (no retry): its tabs are closed too.
    failed = await run_browsing_task(stack, site, Turn.fail(400, "the model refused the request"))
    assert failed.status == "failed" and failed.attempt_count == 1, failed
    await assert_tabs_closed(stack, failed)


async def test_a_task_on_a_chat_session_leaves_that_chats_tabs_open(stack: Stack, site: LoginSite) -> None:
    """The tabs of a task that ran on a chat session are the chat's (the user may have taken one over)."""
    async with stack.client() as client:
        created = await client.post("/api/sessions", json={"title": "browsing chat"})
        assert created.status_code in (200, 201), created.text
        session_id = created.json()["id"]
        stack.models.push(
            Turn.call(
                ToolCall(NAV, {"operation": "browser_navigate", "arguments": {"url": site.url("/login")}}, id="n")
            ),
            Turn.say("Visited."),
        )
        task_id = await stack.create_task("visit the login page", session_id=session_id)
        task = await stack.wait_task(task_id, *TERMINAL)
        stack.models.reset()
        assert (task.status, task.thread_id) == ("completed", session_id), task
        # The task's TaskStop observers have run (wait_task): the chat's tab is still there.
        assert session_id in await browser_sessions(stack)
        (await client.delete(f"/api/sessions/{session_id}")).raise_for_status()


async def test_an_observer_that_raises_changes_nothing_durable(stack: Stack, site: LoginSite) -> None:
    RAISING.fail = True
    completed = await run_browsing_task(stack, site, Turn.say("Visited."))
    failed = await run_browsing_task(stack, site, Turn.fail(400, "the model refused the request"))
    # Self-update work retries a provider failure, then dead-letters (its turns get no browser).
    stack.models.push(Turn.fail(503, "overloaded"), Turn.fail(500, "still down"), Turn.say("Investigated."))
    # Contained self-update works only in a registered Git repository (docs/self-update.md).
    workspace_id = await git_workspace(stack)
    dead_id = await self_update_task(stack, "Update the dependencies", workspace_id, max_attempts=2)
    dead = await stack.wait_task(dead_id, *TERMINAL)
    await settled_remediation(stack, dead_id, workspace_id)

    # The raising observer was told of every event of each task, and so was the one after it.
    shapes = {
        completed.id: ["start:1", "stop:1:completed"],
        failed.id: ["start:1", "stop:1:failed"],
        dead_id: ["start:1", "stop:1:failed:retry", "start:2", "stop:2:dead-letter"],
    }
    for task_id, shape in shapes.items():
        assert RAISING.shape(task_id) == shape
        assert RECORDING.shape(task_id) == shape
    # The service's own observers ran too: the TaskStop hooks, and the browser-close observer.
    stopped = [
        (request["detail"]["taskId"], request["detail"]["status"])
        for request in stack.hook_requests("TaskStop")
        if request["detail"]["taskId"] in shapes
    ]
    assert sorted(stopped) == sorted(
        [(completed.id, "completed"), (failed.id, "failed"), (dead_id, "failed"), (dead_id, "dead-letter")]
    )
    await assert_tabs_closed(stack, completed)
    await assert_tabs_closed(stack, failed)

    # Nothing durable moved: each task holds the terminal state its last attempt reached, and still
    # does after the observers ran.
    expected = {
        completed.id: ("completed", 1, "", False),
        failed.id: ("failed", 1, failed.last_error_class, False),
        dead_id: ("dead-letter", 2, "provider", True),
    }
    assert failed.last_error_class not in ("", "unknown")
    for task_id, (status, attempts, error_class, dead_lettered) in expected.items():
        now = await stack.get_task(task_id)
        assert (now.status, now.attempt_count, now.last_error_class) == (status, attempts, error_class), now
        assert (now.dead_lettered_at != "") is dead_lettered and now.next_attempt_at == ""
    assert (await stack.get_task(completed.id)).outcome == "Visited."
    assert dead.status == "dead-letter"
