"""`make run`'s launcher runs real task turns: a task created through the gateway is
claimed by the tasks process's worker and answered by agent-runner's turn, in a thread of
its own; a task-runtime PATCH resizes the running worker."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import httpx
import pytest

from support.launcher import launch, start_model_server

pytestmark = [pytest.mark.timeout(240), pytest.mark.xdist_group("stack")]


def test_a_task_created_through_the_gateway_completes_as_an_agent_turn(tmp_path: Path) -> None:
    models, models_url = start_model_server(tmp_path)
    stack = launch(tmp_path, {"NINEROUTER_URL": models_url})
    try:
        stack.wait_running()
        with httpx.Client(base_url=stack.url, headers={"x-popagent-key": stack.api_key}, timeout=10) as client:
            created = client.post(
                "/api/tasks", json={"prompt": "Report in", "workspaceId": "popagent", "model": "fake/fake-chat"}
            )
            assert created.status_code == 201, created.text
            task_id = created.json()["id"]
            deadline = time.monotonic() + 60
            while True:
                task = client.get(f"/api/tasks/{task_id}").json()
                if task["status"] in ("completed", "failed", "dead-letter", "cancelled"):
                    break
                assert time.monotonic() < deadline, f"task still {task['status']}"
                time.sleep(0.2)
            # Without a session the task ran in a thread of its own: readable, never a listed chat.
            assert task["sessionId"] is None and task["threadId"] == f"task-{task_id}", task
            listed = client.get("/api/sessions").json()["sessions"]
            assert task["threadId"] not in [session["id"] for session in listed]
            assert client.get(f"/api/sessions/{task['threadId']}").status_code == 200
        assert (task["status"], task["outcome"]) == ("completed", "Launcher task done."), task
        stack.process.send_signal(signal.SIGINT)
        assert stack.process.wait(30) == 0
    finally:
        if stack.process.poll() is None:
            stack.process.kill()
        models.terminate()
        models.wait(10)


def test_a_task_runtime_patch_resizes_the_running_worker(tmp_path: Path) -> None:
    # Every answer streams for about six seconds, so two attempts visibly overlap or do not.
    models, models_url = start_model_server(tmp_path, {"text": "x" * 48, "chunk_size": 4, "chunk_delay_s": 0.5})
    stack = launch(tmp_path, {"NINEROUTER_URL": models_url})
    try:
        stack.wait_running()
        with httpx.Client(base_url=stack.url, headers={"x-popagent-key": stack.api_key}, timeout=10) as client:

            def patch_concurrency(value: int) -> None:
                patched = client.patch("/api/settings/agent-runtime", json={"taskConcurrency": value})
                assert patched.status_code == 200 and patched.json()["taskConcurrency"] == value, patched.text

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
            deadline = time.monotonic() + 30
            while "running" not in statuses(ids):
                assert time.monotonic() < deadline, "no attempt started"
                time.sleep(0.1)
            # One slot on the running worker: the other task waits.
            for _ in range(10):
                assert sorted(statuses(ids)) == ["queued", "running"]
                time.sleep(0.1)

            patch_concurrency(2)
            deadline = time.monotonic() + 5
            while statuses(ids) != ["running", "running"]:
                assert time.monotonic() < deadline, (
                    f"the second attempt did not start beside the first: {statuses(ids)}"
                )
                time.sleep(0.1)
            deadline = time.monotonic() + 60
            while statuses(ids) != ["completed", "completed"]:
                assert time.monotonic() < deadline, f"tasks still {statuses(ids)}"
                time.sleep(0.2)
            assert [client.get(f"/api/tasks/{task_id}").json()["attemptCount"] for task_id in ids] == [1, 1]
        stack.process.send_signal(signal.SIGINT)
        assert stack.process.wait(30) == 0
    finally:
        if stack.process.poll() is None:
            stack.process.kill()
        models.terminate()
        models.wait(10)
