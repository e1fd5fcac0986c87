"""The task and schedule API over real HTTP: gateway (uvicorn on a free port) -> gRPC ->
the tasks service (in-process, real PostgreSQL and NATS, a scripted executor)."""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime

import httpx
import pytest

from popagent.tasks.v1 import tasks_pb2, tasks_pb2_grpc
from popagent_core.errors import PermissionDenied
from popagent_core.grpc_client import map_rpc_errors, open_channel
from popagent_core.settings import load_settings
from popagent_gateway.settings import Settings as GatewaySettings
from popagent_tasks.service import RunningTasks, build
from popagent_tasks.settings import Settings
from support.stacks import serve_gateway
from support.waiting import eventually
from tasks.executors import ScriptedExecutor
from tasks.harness import tasks_env

API_KEY = "t" * 32


@dataclass
class Stack:
    http: httpx.AsyncClient
    tasks: RunningTasks
    settings: Settings
    executor: ScriptedExecutor
    tokens: dict[str, str]
    dsn: str


@contextlib.asynccontextmanager
async def gateway_client(tasks_address: str, token: str, dsn: str) -> AsyncIterator[httpx.AsyncClient]:
    """The real gateway app over the tasks service, and a client of its `/api` with the key."""
    settings = GatewaySettings.model_validate(
        {
            "DATABASE_URL": dsn,
            "OBSERVABILITY_DATABASE_URL": dsn,
            "POPAGENT_API_KEY": API_KEY,
            "POPAGENT_INTERNAL_TOKEN": token,
            "POPAGENT_TASKS_ADDR": tasks_address,
        }
    )
    async with (
        serve_gateway(settings) as url,
        httpx.AsyncClient(base_url=f"{url}/api", headers={"x-popagent-key": API_KEY}, timeout=10) as client,
    ):
        yield client


@pytest.fixture
async def stack(
    tasks_dsn: str, nats_url: str, internal_credentials: tuple[dict[str, str], str]
) -> AsyncIterator[Stack]:
    tokens, callers = internal_credentials
    # Polling every 30 s: anything that starts sooner was woken by the NATS fact.
    env = tasks_env(
        tasks_dsn,
        nats_url,
        callers,
        POPAGENT_TASKS_POLL_INTERVAL_S="30",
        POPAGENT_TASKS_SWEEP_INTERVAL_S="30",
        POPAGENT_TASKS_HEARTBEAT_INTERVAL_S="0.3",
        POPAGENT_TASKS_SHUTDOWN_GRACE_S="0.2",
        POPAGENT_TASKS_ABORT_ACK_S="0.3",
    )
    settings = load_settings(Settings, "tasks", **env)
    executor = ScriptedExecutor(dsn=tasks_dsn)
    async with (
        build(settings, executor=executor) as running,
        gateway_client(settings.grpc_address, tokens["gateway"], tasks_dsn) as http,
    ):
        yield Stack(http, running, settings, executor, tokens, tasks_dsn)


async def task_json(stack: Stack, task_id: str) -> dict:
    response = await stack.http.get(f"/tasks/{task_id}")
    assert response.status_code == 200, response.text
    return response.json()


async def wait_task(stack: Stack, task_id: str, *statuses: str) -> dict:
    return await eventually(lambda: task_json(stack, task_id), until=lambda t: t["status"] in statuses, within=10)


async def test_a_created_task_is_woken_through_nats_and_runs(stack: Stack) -> None:
    started = time.monotonic()
    response = await stack.http.post(
        "/tasks", json={"prompt": "progress:working;ok", "workspaceId": "ws-1", "model": "m/x", "sessionId": "s-1"}
    )
    assert response.status_code == 201, response.text
    created = response.json()
    assert (created["status"], created["source"], created["kind"], created["maxAttempts"]) == (
        "queued",
        "user",
        "task",
        3,
    )

    done = await wait_task(stack, created["id"], "completed")

    assert time.monotonic() - started < 5  # polling alone would take 30 s
    assert done["attemptCount"] == 1
    assert done["outcome"] == "ok"
    assert (done["workspaceId"], done["model"], done["sessionId"]) == ("ws-1", "m/x", "s-1")
    assert done["turnId"] and len(done["traceId"]) == 32
    assert done["progress"] == [{"attempt": 1, "kind": "progress", "message": "working"}]
    listed = (await stack.http.get("/tasks", params={"workspaceId": "ws-1", "status": "completed"})).json()
    assert [t["id"] for t in listed["tasks"]] == [created["id"]]
    assert (await stack.http.get("/tasks", params={"workspaceId": "other"})).json() == {"tasks": []}


async def test_resolve_turns_failed_work_completed_and_clears_failure_fields(stack: Stack) -> None:
    created = (await stack.http.post("/tasks", json={"prompt": "fail:validation", "workspaceId": "ws-1"})).json()
    failed = await wait_task(stack, created["id"], "failed")
    assert failed["lastErrorClass"] == "validation"

    response = await stack.http.post(f"/tasks/{created['id']}/resolve", json={"evidence": "fixed by hand in #12"})

    assert response.status_code == 200, response.text
    resolved = response.json()
    assert resolved["status"] == "completed"
    assert resolved["resolution"] == "fixed by hand in #12" and resolved["resolvedAt"]
    assert (
        resolved["lastErrorClass"],
        resolved["lastError"],
        resolved["deadLetteredAt"],
        resolved["nextAttemptAt"],
    ) == (
        None,
        None,
        None,
        None,
    )
    assert (resolved["id"], resolved["attemptCount"], resolved["prompt"]) == (created["id"], 1, "fail:validation")
    assert resolved["progress"][-1]["kind"] == "resolved"
    again = await stack.http.post(f"/tasks/{created['id']}/resolve", json={"evidence": "twice"})
    assert again.status_code == 409


async def test_resolve_refuses_queued_running_and_completed_work(stack: Stack) -> None:
    running = (await stack.http.post("/tasks", json={"prompt": "release:hold", "workspaceId": "ws-1"})).json()
    await wait_task(stack, running["id"], "running")
    done = (await stack.http.post("/tasks", json={"prompt": "ok", "workspaceId": "ws-1"})).json()
    await wait_task(stack, done["id"], "completed")
    queued = await stack.tasks.repo.pool.fetchval(
        "INSERT INTO popagent_agent_tasks (kind, status, source, workspace_id, prompt, model, session_id,"
        " next_attempt_at) VALUES ('task', 'queued', 'user', 'ws-1', 'later', '', '', now() + interval '1 hour')"
        " RETURNING id"
    )

    for task_id in (running["id"], done["id"], str(queued)):
        response = await stack.http.post(f"/tasks/{task_id}/resolve", json={"evidence": "no"})
        assert response.status_code == 409, (task_id, response.text)
    missing = await stack.http.post("/tasks/00000000-0000-0000-0000-000000000000/resolve", json={"evidence": "x"})
    assert missing.status_code == 404
    stack.executor.gate("hold").set()


async def test_delete_removes_terminal_rows_refuses_active_and_404s_missing(stack: Stack) -> None:
    active = (await stack.http.post("/tasks", json={"prompt": "release:keep", "workspaceId": "ws-1"})).json()
    await wait_task(stack, active["id"], "running")
    done = (await stack.http.post("/tasks", json={"prompt": "ok", "workspaceId": "ws-1"})).json()
    await wait_task(stack, done["id"], "completed")

    assert (await stack.http.delete(f"/tasks/{active['id']}")).status_code == 409
    assert (await task_json(stack, active["id"]))["status"] == "running"  # deleting never cancels
    assert (await stack.http.delete(f"/tasks/{done['id']}")).status_code == 204
    assert (await stack.http.get(f"/tasks/{done['id']}")).status_code == 404
    assert (await stack.http.delete(f"/tasks/{done['id']}")).status_code == 404
    assert (await stack.http.delete("/tasks/not-a-uuid")).status_code == 404
    stack.executor.gate("keep").set()
    await wait_task(stack, active["id"], "completed")


async def test_cancel_through_the_api(stack: Stack) -> None:
    running = (await stack.http.post("/tasks", json={"prompt": "sleep:30", "workspaceId": "ws-1"})).json()
    await wait_task(stack, running["id"], "running")

    response = await stack.http.post(f"/tasks/{running['id']}/cancel")

    assert response.status_code == 200 and response.json()["status"] == "cancelling"
    # The worker hears of it on its next heartbeat and the executor stops.
    cancelled = await wait_task(stack, running["id"], "cancelled")
    assert cancelled["attemptCount"] == 1
    assert (await stack.http.post(f"/tasks/{running['id']}/cancel")).status_code == 409
    assert (await stack.http.post("/tasks/00000000-0000-0000-0000-000000000000/cancel")).status_code == 404


@pytest.mark.parametrize(
    "body",
    [
        {"prompt": "ok", "workspaceId": "ws-1", "source": "self-update"},
        {"prompt": "ok", "workspaceId": "ws-1", "maxAttempts": 0},
        {"prompt": "ok", "workspaceId": "ws-1", "maxAttempts": 11},
        {"prompt": "", "workspaceId": "ws-1"},
        {"prompt": "ok"},
        {"prompt": "x" * (32 * 1024 + 1), "workspaceId": "ws-1"},
        {"prompt": 1, "workspaceId": "ws-1"},
    ],
)
async def test_task_bodies_are_strict_and_bounded(stack: Stack, body: dict) -> None:
    response = await stack.http.post("/tasks", json=body)
    assert response.status_code == 422, response.text


async def test_only_internal_callers_other_than_the_gateway_create_self_update_work(stack: Stack) -> None:
    request = tasks_pb2.CreateTaskRequest(prompt="ok", workspace_id="ws-1", source="self-update")
    async with open_channel(stack.settings.grpc_address, stack.tokens["gateway"]) as channel:
        with pytest.raises(PermissionDenied), map_rpc_errors():
            await tasks_pb2_grpc.TasksServiceStub(channel).CreateTask(request)
    async with open_channel(stack.settings.grpc_address, stack.tokens["agent-runner"]) as channel:
        task = await tasks_pb2_grpc.TasksServiceStub(channel).CreateTask(request)
    assert task.source == "self-update"


async def test_schedules_crud_with_server_timezone_preview_and_preserved_max_attempts(stack: Stack) -> None:
    bad = await stack.http.post(
        "/schedules", json={"name": "n", "prompt": "ok", "cron": "61 * * * *", "workspaceId": "ws-1"}
    )
    # The document's cron pattern refuses an out-of-range field at the gateway, naming it.
    assert bad.status_code == 422 and bad.json()["details"][0]["loc"] == ["body", "cron"]
    with_tz = await stack.http.post(
        "/schedules",
        json={"name": "n", "prompt": "ok", "cron": "0 3 * * *", "workspaceId": "ws-1", "timezone": "Asia/Tokyo"},
    )
    assert with_tz.status_code == 422

    created = await stack.http.post(
        "/schedules",
        json={"name": "nightly", "prompt": "ok", "cron": "0 3 * * *", "workspaceId": "ws-1", "maxAttempts": 5},
    )
    assert created.status_code == 201, created.text
    schedule = created.json()
    assert (schedule["source"], schedule["timezone"], schedule["maxAttempts"], schedule["enabled"]) == (
        "user",
        stack.settings.timezone,
        5,
        True,
    )
    runs = [datetime.fromisoformat(run) for run in schedule["nextRuns"]]
    assert len(runs) == 5 and runs == sorted(runs) and runs[0] == datetime.fromisoformat(schedule["nextRunAt"])
    assert all((b - a).total_seconds() == 86400 for a, b in itertools.pairwise(runs))

    renamed = (await stack.http.patch(f"/schedules/{schedule['id']}", json={"name": "renamed"})).json()
    assert (renamed["name"], renamed["maxAttempts"], renamed["nextRunAt"]) == ("renamed", 5, schedule["nextRunAt"])
    retimed = (
        await stack.http.patch(f"/schedules/{schedule['id']}", json={"cron": "30 4 * * *", "maxAttempts": 2})
    ).json()
    assert retimed["maxAttempts"] == 2 and retimed["nextRunAt"] != schedule["nextRunAt"]
    assert datetime.fromisoformat(retimed["nextRunAt"]).minute == 30
    assert (await stack.http.patch(f"/schedules/{schedule['id']}", json={"timezone": "UTC"})).status_code == 422
    assert (await stack.http.patch(f"/schedules/{schedule['id']}", json={"cron": "nope"})).status_code == 422

    listed = (await stack.http.get("/schedules")).json()["schedules"]
    assert [s["id"] for s in listed] == [schedule["id"]]
    assert (await stack.http.delete(f"/schedules/{schedule['id']}")).status_code == 204
    assert (await stack.http.delete(f"/schedules/{schedule['id']}")).status_code == 404
    assert (await stack.http.patch(f"/schedules/{schedule['id']}", json={"name": "x"})).status_code == 404


async def test_system_schedules_cannot_be_changed_or_deleted_through_the_api(stack: Stack) -> None:
    system_id = await stack.tasks.repo.pool.fetchval(
        "INSERT INTO popagent_agent_schedules (source, workspace_id, name, prompt, model, session_id, cron,"
        " timezone, next_run_at, enabled, max_attempts)"
        " VALUES ('self-update', 'ws-1', 'self-update', 'improve', '', '', '0 4 * * *', 'UTC',"
        " now() + interval '1 day', true, 3) RETURNING id"
    )

    # Refused with the reason (the row is the self-update scheduler's), not passed off as missing.
    changed = await stack.http.patch(f"/schedules/{system_id}", json={"name": "mine now"})
    deleted = await stack.http.delete(f"/schedules/{system_id}")
    assert changed.status_code == deleted.status_code == 403
    assert "self-update scheduler" in changed.json()["error"] and "autonomy settings" in deleted.json()["error"]
    listed = (await stack.http.get("/schedules")).json()["schedules"]
    assert [(s["id"], s["source"], s["name"]) for s in listed] == [(str(system_id), "self-update", "self-update")]
