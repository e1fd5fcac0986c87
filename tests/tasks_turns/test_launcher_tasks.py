"""`make run`'s launcher runs real task turns: a task created through the gateway is
claimed by the tasks process's worker and answered by agent-runner's turn, in a thread of
its own; a task-runtime PATCH resizes the running worker."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator

import httpx
import pytest

from support.launcher import Launched, launch, start_model_server
from support.waiting import wait_until

pytestmark = [pytest.mark.timeout(240), pytest.mark.xdist_group("stack-work")]
TERMINAL = ("completed", "failed", "dead-letter", "cancelled")


def status(client: httpx.Client, task_id: str) -> str:
    return client.get(f"/api/tasks/{task_id}").json()["status"]


# Every answer to a slow task streams for about six seconds, so two attempts visibly overlap or do not.
SLOW_TASK = "slow task"
SLOW_TURN: dict[str, object] = {"text": "x" * 48, "chunk_size": 4, "chunk_delay_s": 0.5}


@pytest.fixture(scope="module")
def launched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Launched, httpx.Client]]:
    """`make run`'s launcher on a scripted model server (the slow answer to a prompt naming a slow
    task, "Launcher task done." to any other), and a client of its gateway, for the module's tests:
    each makes tasks of its own. Afterwards the launcher must stop cleanly on SIGINT."""
    base = tmp_path_factory.mktemp("launcher-tasks")
    models, models_url = start_model_server(base, by_prompt={SLOW_TASK: SLOW_TURN})
    stack = launch(base, {"NINEROUTER_URL": models_url})
    try:
        stack.wait_running()
        with httpx.Client(base_url=stack.url, headers={"x-popagent-key": stack.api_key}, timeout=10) as client:
            yield stack, client
        stack.process.send_signal(signal.SIGINT)
        assert stack.process.wait(30) == 0
    finally:
        if stack.process.poll() is None:
            stack.process.kill()
        models.terminate()
        models.wait(10)


@pytest.fixture
def client(launched: tuple[Launched, httpx.Client]) -> httpx.Client:
    return launched[1]


def applied_concurrency(stack: Launched) -> int | None:
    """The task concurrency the tasks worker last applied, as its log says (at start and at each change)."""
    log = stack.data_dir / "logs" / "tasks.log"
    applied = None
    for line in log.read_text(errors="replace").splitlines() if log.exists() else []:
        if '"concurrency"' in line and line.startswith("{"):
            entry = json.loads(line)
            if entry.get("msg", "").startswith("worker runtime"):
                applied = entry["concurrency"]
    return applied


def test_a_task_created_through_the_gateway_completes_as_an_agent_turn(client: httpx.Client) -> None:
    created = client.post(
        "/api/tasks", json={"prompt": "Report in", "workspaceId": "popagent", "model": "fake/fake-chat"}
    )
    assert created.status_code == 201, created.text
    task_id = created.json()["id"]
    wait_until(lambda: status(client, task_id) in TERMINAL, what="the task to finish", within=60)
    task = client.get(f"/api/tasks/{task_id}").json()
    # Without a session the task ran in a thread of its own: readable, never a listed chat.
    assert task["sessionId"] is None and task["threadId"] == f"task-{task_id}", task
    listed = client.get("/api/sessions").json()["sessions"]
    assert task["threadId"] not in [session["id"] for session in listed]
    assert client.get(f"/api/sessions/{task['threadId']}").status_code == 200
    assert (task["status"], task["outcome"]) == ("completed", "Launcher task done."), task


def test_a_task_runtime_patch_resizes_the_running_worker(launched: tuple[Launched, httpx.Client]) -> None:
    stack, client = launched

    def patch_concurrency(value: int) -> None:
        patched = client.patch("/api/settings/agent-runtime", json={"taskConcurrency": value})
        assert patched.status_code == 200 and patched.json()["taskConcurrency"] == value, patched.text
        # The worker hears of the change through an event: the tasks created next meet the new size
        # only once it applied it (a worker already claiming at the old size could take both).
        wait_until(lambda: applied_concurrency(stack) == value, what=f"the worker to apply {value}", within=30)

    def statuses(ids: list[str]) -> list[str]:
        return [client.get(f"/api/tasks/{task_id}").json()["status"] for task_id in ids]

    patch_concurrency(1)
    ids = []
    for prompt in ("First slow task", "Second slow task"):
        created = client.post(
            "/api/tasks", json={"prompt": prompt, "workspaceId": "popagent", "model": "fake/fake-chat"}
        )
        assert created.status_code == 201, created.text
        ids.append(created.json()["id"])
    wait_until(lambda: "running" in statuses(ids), what="an attempt to start", within=30)
    # One slot on the running worker: the other task waits.
    for _ in range(10):
        assert sorted(statuses(ids)) == ["queued", "running"]
        time.sleep(0.1)

    patch_concurrency(2)
    wait_until(
        lambda: statuses(ids) == ["running", "running"],
        what="the second attempt to start beside the first",
        within=5,
    )
    wait_until(lambda: statuses(ids) == ["completed", "completed"], what="both tasks to complete", within=60)
    assert [client.get(f"/api/tasks/{task_id}").json()["attemptCount"] for task_id in ids] == [1, 1]
