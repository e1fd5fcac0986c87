"""TaskStart/TaskStop through the real hooks service to a real HTTPS receiver."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from popagent_core.settings import load_settings
from popagent_dev.embedded import free_port
from popagent_hooks.service import MIGRATIONS as HOOKS_MIGRATIONS
from popagent_hooks.service import build as build_hooks
from popagent_hooks.settings import Settings as HooksSettings
from popagent_tasks.service import MIGRATIONS as TASKS_MIGRATIONS
from popagent_tasks.service import build as build_tasks
from popagent_tasks.settings import Settings
from support.https_receiver import HttpsReceiver, Reply, answer, make_secret
from support.waiting import eventually
from tasks.executors import ScriptedExecutor
from tasks.harness import tasks_env


@pytest.fixture
async def receiver(tmp_path: Path) -> AsyncIterator[HttpsReceiver]:
    async with HttpsReceiver(tmp_path) as running:
        yield running


def hooks_document(receiver: HttpsReceiver, path: str) -> str:
    def handler(handler_id: str) -> dict[str, object]:
        return {"id": handler_id, "type": "http", "url": receiver.url(path), "secret": make_secret()}

    return json.dumps({"version": 1, "hooks": {"TaskStart": [handler("start")], "TaskStop": [handler("stop")]}})


@pytest.mark.parametrize("reply", ["pass", "http-500"])
async def test_task_lifecycle_reaches_https_hooks_with_one_turn_id_and_never_changes_the_outcome(
    make_database,  # type: ignore[no-untyped-def]
    nats_url: str,
    internal_credentials: tuple[dict[str, str], str],
    receiver: HttpsReceiver,
    reply: str,
) -> None:
    tokens, callers = internal_credentials
    dsn = await make_database({"hooks": HOOKS_MIGRATIONS, "tasks": TASKS_MIGRATIONS})
    receiver.script("/tasks", answer("pass") if reply == "pass" else Reply(status=500, json_body={"oops": True}))
    hooks_address = f"127.0.0.1:{free_port()}"
    hooks_settings = HooksSettings(
        **{
            "DATABASE_URL": dsn,
            "NATS_URL": nats_url,
            "POPAGENT_INTERNAL_CALLERS": callers,
            "POPAGENT_HOOKS_ADDR": hooks_address,
            "POPAGENT_HOOK_ALLOWED_HOSTS": "127.0.0.1",
            "POPAGENT_HOOK_ALLOW_PRIVATE_ADDRESSES": "true",
            "POPAGENT_HOOK_CA_FILE": str(receiver.ca_file),
            "POPAGENT_HOOKS": hooks_document(receiver, "/tasks"),
        }
    )
    env = tasks_env(
        dsn,
        nats_url,
        callers,
        POPAGENT_TASKS_HOOKS_ENABLED="true",
        POPAGENT_HOOKS_ADDR=hooks_address,
        POPAGENT_INTERNAL_TOKEN=tokens["tasks"],
        POPAGENT_TASKS_SHUTDOWN_GRACE_S="0.2",
        POPAGENT_TASKS_ABORT_ACK_S="0.2",
    )
    settings = load_settings(Settings, "tasks", **env)

    async with build_hooks(hooks_settings), build_tasks(settings, executor=ScriptedExecutor()) as running:
        task = await running.repo.create_task(
            source="user", workspace_id="ws-1", prompt="ok", model="m/x", session_id="s-1", max_attempts=3
        )
        requests = await eventually(
            lambda: receiver.requests_for("/tasks"), until=lambda found: len(found) >= 2, within=10
        )
        final = await running.repo.get_task(str(task.id))

    assert final.status == "completed"
    start, stop = (request.json() for request in requests[:2])
    assert (start["event"], stop["event"]) == ("TaskStart", "TaskStop")
    assert start["turnId"] == stop["turnId"] == str(final.turn_id)
    assert start["sessionId"] == stop["sessionId"] == "s-1"
    assert start["detail"]["traceId"] == stop["detail"]["traceId"] == final.trace_id
    assert start["detail"]["taskId"] == str(task.id) and start["detail"]["prompt"] == "ok"
    assert (stop["detail"]["status"], stop["detail"]["outcome"], stop["detail"]["attempt"]) == ("completed", "ok", 1)
