"""`make run`'s launcher runs real task turns: a task created through the gateway is
claimed by the tasks process's worker and answered by agent-runner's turn."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from support.launcher import launch

pytestmark = [pytest.mark.timeout(240), pytest.mark.xdist_group("stack")]

TESTS = Path(__file__).resolve().parents[1]


def start_model_server(tmp_path: Path) -> tuple[subprocess.Popen[str], str]:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": [{"text": "Launcher task done."}], "loop": True}))
    process = subprocess.Popen(
        [sys.executable, "-m", "support.model_gateway", "--script", str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])},
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("model gateway listening on "), line
    return process, line.removeprefix("model gateway listening on ").strip()


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
        assert (task["status"], task["outcome"]) == ("completed", "Launcher task done."), task
        stack.process.send_signal(signal.SIGINT)
        assert stack.process.wait(30) == 0
    finally:
        if stack.process.poll() is None:
            stack.process.kill()
        models.terminate()
        models.wait(10)
