"""The stack for the task-turn tests: hooks, agent-runner and tasks, in one event loop.

The chat tests' pieces (fresh database, scripted model server, HTTPS hook receiver) are
reused; what differs is the hooks document, which also routes `TaskStart`/`TaskStop` to
the receiver, and the tasks service, whose worker runs every attempt through agent-runner's
`RunTask` with the real executor and takes its timing from agent-runner's settings.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chat.stack import CATALOG, HOOK_PATHS, MODEL

from popagent.agent_runner.v1 import agent_runner_pb2 as arpb
from popagent.agent_runner.v1 import agent_runner_pb2_grpc
from popagent.tasks.v1 import tasks_pb2 as tpb
from popagent.tasks.v1 import tasks_pb2_grpc
from popagent_agent_runner.service import build as build_agent_runner
from popagent_agent_runner.settings import Settings as AgentRunnerSettings
from popagent_core.grpc_client import open_channel
from popagent_dev import embedded
from popagent_dev.embedded import free_port
from popagent_tasks.service import RunningTasks
from popagent_tasks.service import build as build_tasks
from popagent_tasks.settings import Settings as TasksSettings
from support.https_receiver import HttpsReceiver, answer
from support.model_gateway import ModelGateway
from support.stacks import fresh_database, serve_hooks

TASK_HOOK_PATHS: dict[str, tuple[str, list[str] | None]] = {
    **HOOK_PATHS,
    "TaskStart": ("/task-start", None),
    "TaskStop": ("/task-stop", None),
}
# Fast worker timing, set in agent-runner's settings (the worker must read it from there).
RUNTIME: dict[str, Any] = {
    "task_concurrency": 4,
    "task_poll_interval_ms": 200,
    "task_heartbeat_interval_ms": 200,
    "task_heartbeat_timeout_ms": 3000,
    "task_attempt_timeout_ms": 30_000,
    "task_abort_ack_timeout_ms": 3000,
    "task_retry_base_ms": 100,
    "task_retry_cap_ms": 200,
}


@dataclass
class TaskTurnStack:
    receiver: HttpsReceiver
    models: ModelGateway
    tasks: tasks_pb2_grpc.TasksServiceStub
    running: RunningTasks
    state: agent_runner_pb2_grpc.AgentRunnerStateServiceStub
    # The default workspace's checkout (`popagent`), where task turns' workspace tools work.
    repository: Path

    def reset(self) -> None:
        for path, _ in TASK_HOOK_PATHS.values():
            self.receiver.script(path, answer("pass"))
        self.receiver.requests.clear()
        self.models.requests.clear()
        self.models.responder = None
        self.models._turns.clear()  # pyright: ignore[reportPrivateUsage]

    def hook_requests(self, event: str) -> list[dict[str, Any]]:
        return [request.json() for request in self.receiver.requests_for(TASK_HOOK_PATHS[event][0])]

    async def create(self, prompt: str, **fields: Any) -> str:
        task = await self.tasks.CreateTask(
            tpb.CreateTaskRequest(prompt=prompt, model=MODEL, workspace_id="popagent", **fields)
        )
        return task.id

    async def get(self, task_id: str) -> tpb.Task:
        return await self.tasks.GetTask(tpb.GetTaskRequest(id=task_id))

    async def wait(self, task_id: str, *statuses: str, within: float = 20.0) -> tpb.Task:
        """The task once it is in one of `statuses` and no worker holds it (its TaskStop is out)."""
        deadline = time.monotonic() + within
        while True:
            task = await self.get(task_id)
            worker = self.running.worker
            held = worker is not None and any(str(key) == task_id for key in worker.slots)
            if task.status in statuses and not held:
                return task
            if time.monotonic() > deadline:
                raise AssertionError(f"task {task_id} is {task.status}, not {statuses}")
            await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def start_task_turn_stack(
    pg_dsn: str, credentials: tuple[dict[str, str], str], base: Path, **runtime: Any
) -> AsyncIterator[TaskTurnStack]:
    """The stack; `runtime` overrides agent-runtime settings the worker reads at start."""
    tokens, callers = credentials
    workspace_root = base / "workspace"
    (workspace_root / "popagent").mkdir(parents=True)
    addresses = {name: f"127.0.0.1:{free_port()}" for name in ("agent-runner", "hooks", "tasks")}
    nats = embedded.start_nats(base / "nats")
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(nats.stop)
        dsn = await stack.enter_async_context(fresh_database(pg_dsn, "popagent_task_turns"))
        (base / "receiver").mkdir()
        receiver = await stack.enter_async_context(HttpsReceiver(base / "receiver"))
        models = await stack.enter_async_context(ModelGateway(models=CATALOG, api_key="sk-task-tests"))
        common: dict[str, Any] = {"DATABASE_URL": dsn, "NATS_URL": nats.url, "POPAGENT_INTERNAL_CALLERS": callers}
        await stack.enter_async_context(
            serve_hooks(common, tokens["hooks"], addresses["hooks"], receiver, TASK_HOOK_PATHS)
        )
        await stack.enter_async_context(
            build_agent_runner(
                AgentRunnerSettings(
                    **{
                        **common,
                        "POPAGENT_INTERNAL_TOKEN": tokens["agent-runner"],
                        "POPAGENT_AGENT_RUNNER_ADDR": addresses["agent-runner"],
                        "POPAGENT_HOOKS_ADDR": addresses["hooks"],
                        "POPAGENT_BROWSER_BRIDGE_ADDR": f"127.0.0.1:{free_port()}",
                        "POPAGENT_WORKSPACE_ROOT": str(workspace_root),
                        "NINEROUTER_URL": models.url,
                        "NINEROUTER_API_KEY": "sk-task-tests",
                    }
                )
            )
        )
        # A caller other than the gateway may create self-update tasks.
        channel = await stack.enter_async_context(open_channel(addresses["agent-runner"], tokens["evolution"]))
        state = agent_runner_pb2_grpc.AgentRunnerStateServiceStub(channel)
        updated = await state.UpdateAgentRuntimeSettings(arpb.UpdateAgentRuntimeSettingsRequest(**(RUNTIME | runtime)))
        assert not updated.violations, updated.violations
        running = await stack.enter_async_context(
            build_tasks(
                TasksSettings(
                    **{
                        **common,
                        "POPAGENT_INTERNAL_TOKEN": tokens["tasks"],
                        "POPAGENT_TASKS_ADDR": addresses["tasks"],
                        "POPAGENT_HOOKS_ADDR": addresses["hooks"],
                        "POPAGENT_AGENT_RUNNER_ADDR": addresses["agent-runner"],
                        "POPAGENT_TASKS_EXECUTOR": "popagent_tasks.agent_runner_executor:executor",
                        # Deliberately slow: the worker must not use these when agent-runner answers.
                        "POPAGENT_TASKS_RETRY_BASE_S": "60",
                        "POPAGENT_TASKS_RETRY_CAP_S": "120",
                        "POPAGENT_TASKS_SWEEP_INTERVAL_S": "0.5",
                    }
                )
            )
        )
        tasks_channel = await stack.enter_async_context(open_channel(addresses["tasks"], tokens["evolution"]))
        yield TaskTurnStack(
            receiver,
            models,
            tasks_pb2_grpc.TasksServiceStub(tasks_channel),
            running,
            state,
            workspace_root / "popagent",
        )


__all__ = ["MODEL", "TaskTurnStack", "start_task_turn_stack"]
