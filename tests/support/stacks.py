"""The in-process stack of real services the API, chat and task-turn suites run against.

`start_stack(pg_dsn, credentials, base, spec)` starts, in one event loop, the services a
`StackSpec` names, each from its own `build(Settings(...))` with gRPC on a free port: the
hooks service (one handler per event on its own path of a real HTTPS receiver),
agent-runner (as one or more workers, its turn pointed at the scripted model server over
real HTTP), and as the spec asks evolution, secrets, browser-bridge, tasks (its worker
running every attempt through agent-runner's `RunTask`) and the gateway app on uvicorn;
all on a fresh database and a private NATS server. A setting naming a service the stack
does not run points at a port where nothing listens.

The suites differ only in their spec (`API_STACK`, `CHAT_STACK`, `TASK_TURN_STACK`); the
building blocks (`fresh_database`, `serve_gateway`, `serve_hooks`) serve other suites too.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import os
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import uvicorn

from popagent.agent_runner.v1 import agent_runner_pb2 as arpb
from popagent.agent_runner.v1 import agent_runner_pb2_grpc
from popagent.tasks.v1 import tasks_pb2 as tpb
from popagent.tasks.v1 import tasks_pb2_grpc
from popagent_agent_runner.service import build as build_agent_runner
from popagent_agent_runner.settings import Settings as AgentRunnerSettings
from popagent_browser_bridge.service import build as build_browser_bridge
from popagent_browser_bridge.settings import Settings as BrowserBridgeSettings
from popagent_core.grpc_client import open_channel
from popagent_dev import embedded
from popagent_dev.embedded import free_port, with_database
from popagent_evolution.service import RunningEvolution
from popagent_evolution.service import build as build_evolution
from popagent_evolution.settings import Settings as EvolutionSettings
from popagent_gateway.app import create_app
from popagent_gateway.serving import server_config
from popagent_gateway.settings import Settings as GatewaySettings
from popagent_hooks.service import build as build_hooks
from popagent_hooks.settings import Settings as HooksSettings
from popagent_secrets.service import build as build_secrets
from popagent_secrets.settings import Settings as SecretsSettings
from popagent_tasks.service import RunningTasks
from popagent_tasks.service import build as build_tasks
from popagent_tasks.settings import Settings as TasksSettings
from support.canary import CANARY
from support.https_receiver import HttpsReceiver, answer, make_secret
from support.model_gateway import ModelGateway, ModelInfo
from support.waiting import eventually
from support.web_standins import PageServer, SearxngStandIn

API_KEY = "stack-tests-api-key-" + "k" * 16
MODELS_API_KEY = "sk-stack-tests"
MODEL = "fake/fake-chat"
# The one model the scripted catalog prices (USD per token), for the cost-per-message tests.
PRICED_MODEL = "fake/priced-chat"
PRICES = {"prompt": "0.000002", "completion": "0.00001", "input_cache_read": "0.0000005"}
CATALOG = (
    ModelInfo(MODEL, context_length=128_000),
    ModelInfo("cx/gpt-5.3-codex", context_length=400_000),
    ModelInfo("cx/gpt-5.3-codex-spark", context_length=128_000),
    ModelInfo(PRICED_MODEL, context_length=128_000, pricing=PRICES),
)
SPECIALISTS = ("researcher", "implementer", "reviewer")
# Documentation search's models at the scripted gateway (its /v1/embeddings and /v1/rerank).
EMBEDDING_MODEL = "fake/fake-embed"
RERANK_MODEL = "fake/fake-rerank"
# The session's canary, provisioned as a real secret in every stack that runs secrets.
CANARY_RESOURCE = "canary"
CANARY_NAME = "session-canary"

# Hook event -> (receiver path, matcher or None for every target).
HookPaths = Mapping[str, tuple[str, list[str] | None]]


@contextlib.asynccontextmanager
async def fresh_database(admin_dsn: str, prefix: str) -> AsyncIterator[str]:
    """A new, empty database named `<prefix>_<random>`, dropped afterwards."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    try:
        yield with_database(admin_dsn, name)
    finally:
        conn = await asyncpg.connect(admin_dsn)
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()


@contextlib.asynccontextmanager
async def serve_gateway(settings: GatewaySettings) -> AsyncIterator[str]:
    """The gateway app served as `python -m popagent_gateway` serves it, on a free port; yields its base URL."""
    port = free_port()
    config = server_config(
        create_app(settings), host="127.0.0.1", port=port, limits=settings.edge_limits(), lifespan="on"
    )
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())

    def started() -> bool:
        if serving.done():
            serving.result()  # start-up failed: raise its error
        return server.started

    await eventually(started, within=60, interval=0.01, what="the gateway to start")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await serving


def hooks_document(receiver: HttpsReceiver, paths: HookPaths) -> str:
    """`POPAGENT_HOOKS` with one HTTP handler per event, each on its own path of `receiver`."""
    hooks: dict[str, list[dict[str, Any]]] = {}
    for event, (path, matcher) in paths.items():
        handler: dict[str, Any] = {
            "id": event.lower(),
            "type": "http",
            "url": receiver.url(path),
            "secret": make_secret(),
            "timeoutMs": 5000,
        }
        if matcher is not None:
            handler["matcher"] = matcher
        hooks[event] = [handler]
    return json.dumps({"version": 1, "hooks": hooks})


@contextlib.asynccontextmanager
async def serve_hooks(
    common: Mapping[str, Any], token: str, address: str, receiver: HttpsReceiver, paths: HookPaths
) -> AsyncIterator[None]:
    """The hooks service on `address`, with one handler per event of `paths` on `receiver`."""
    settings = HooksSettings(
        **{
            **common,
            "POPAGENT_INTERNAL_TOKEN": token,
            "POPAGENT_HOOKS_ADDR": address,
            "POPAGENT_HOOK_ALLOWED_HOSTS": "127.0.0.1",
            "POPAGENT_HOOK_ALLOW_PRIVATE_ADDRESSES": "true",
            "POPAGENT_HOOK_CA_FILE": str(receiver.ca_file),
            "POPAGENT_HOOKS": hooks_document(receiver, paths),
        }
    )
    async with build_hooks(settings):
        yield


SESSION_END_PATH = "/session-end"
# Every hook event the chat turn dispatches -> (receiver path, matcher or None).
CHAT_HOOK_PATHS: HookPaths = {
    "SessionStart": ("/session-start", None),
    "UserPromptSubmit": ("/prompt", None),
    # No handler matches `remember`: its calls must cost no hook RPC at all.
    "PreToolUse": (
        "/pre-tool",
        ["getTime", "webFetch", "mastra_workspace_write_file", "mastra_workspace_lsp_inspect", *SPECIALISTS],
    ),
    "PostToolUse": ("/post-tool", None),
    "PostToolUseFailure": ("/post-tool-failure", None),
    "SubagentStart": ("/subagent-start", None),
    "SubagentStop": ("/subagent-stop", None),
    "Stop": ("/stop", None),
    "StopFailure": ("/stop-failure", None),
}
TASK_HOOK_PATHS: HookPaths = {
    **CHAT_HOOK_PATHS,
    "TaskStart": ("/task-start", None),
    "TaskStop": ("/task-stop", None),
}
# Fast worker timing, set in agent-runner's settings (the worker must read it from there).
TASK_RUNTIME: Mapping[str, Any] = {
    "task_concurrency": 4,
    "task_poll_interval_ms": 200,
    "task_heartbeat_interval_ms": 200,
    "task_heartbeat_timeout_ms": 3000,
    "task_attempt_timeout_ms": 30_000,
    "task_abort_ack_timeout_ms": 3000,
    "task_retry_base_ms": 100,
    "task_retry_cap_ms": 200,
}

# The services a stack may run besides hooks and agent-runner, which every stack runs.
OPTIONAL_SERVICES = frozenset({"evolution", "secrets", "browser-bridge", "tasks", "gateway"})


@dataclass(frozen=True)
class StackSpec:
    """What one suite's stack runs."""

    name: str  # the fresh database is `popagent_<name>_<random>`
    hook_paths: HookPaths
    services: frozenset[str]  # of OPTIONAL_SERVICES
    runner_workers: int = 1  # agent-runner processes-equivalent; the gateway balances over them
    runtime: Mapping[str, Any] = field(default_factory=dict[str, Any])  # agent-runtime settings written at start
    runner_settings: Mapping[str, str] = field(default_factory=dict[str, str])  # more agent-runner environment
    bridge_env: Mapping[str, str] = field(default_factory=dict[str, str])  # browser-bridge settings (its socket)
    evolution: Mapping[str, Any] = field(default_factory=dict[str, Any])  # evolution's own variables
    # Lifecycle observers the tasks service runs after its own (popagent_tasks.observer.OBSERVERS).
    task_observers: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        unknown = self.services - OPTIONAL_SERVICES
        if unknown:
            raise ValueError(f"unknown services {sorted(unknown)}")

    def with_runtime(self, **overrides: Any) -> StackSpec:
        return dataclasses.replace(self, runtime={**self.runtime, **overrides})


API_STACK = StackSpec(
    "api", {"SessionEnd": (SESSION_END_PATH, None)}, frozenset({"evolution", "secrets", "browser-bridge", "gateway"})
)
# Two agent-runner workers, as `make run` starts it; browser-bridge and evolution, whose browser
# settings and learned state the turns read.
CHAT_STACK = StackSpec("chat", CHAT_HOOK_PATHS, frozenset({"browser-bridge", "evolution", "gateway"}), runner_workers=2)
TASK_TURN_STACK = StackSpec("task_turns", TASK_HOOK_PATHS, frozenset({"tasks"}), runtime=TASK_RUNTIME)
# The MCP server at the gateway's /mcp: its tools call agent-runner and the tasks service.
MCP_STACK = StackSpec("mcp", TASK_HOOK_PATHS, frozenset({"tasks", "gateway"}), runtime=TASK_RUNTIME)
# Users' MCP servers as agent tools: their tokens in the secrets service, a PreToolUse handler for
# every tool of the server named `guarded` (`mcp__guarded__.*`) and a short call timeout.
MCP_TOOLS_HOOK_PATHS: HookPaths = {**CHAT_HOOK_PATHS, "PreToolUse": ("/pre-tool", ["mcp__guarded__.*"])}
MCP_TOOLS_STACK = StackSpec(
    "mcp_tools",
    MCP_TOOLS_HOOK_PATHS,
    frozenset({"secrets", "gateway"}),
    runner_settings={"POPAGENT_MCP_CALL_TIMEOUT_S": "4", "POPAGENT_MCP_CONNECT_WAIT_S": "3"},
)
# Native channels: connections' credentials in the secrets service, replies edited quickly, tasks
# whose results are posted to a connection.
CHANNELS_STACK = StackSpec(
    "channels",
    TASK_HOOK_PATHS,
    frozenset({"secrets", "gateway", "tasks"}),
    runtime=TASK_RUNTIME,
    runner_settings={"POPAGENT_CHANNEL_EDIT_INTERVAL_S": "0.2"},
)
# The evolution loop: a quick worker, signals due at once, one retry a second apart.
LEARNING_STACK = StackSpec(
    "learning",
    CHAT_HOOK_PATHS,
    frozenset({"evolution", "gateway"}),
    evolution={
        "POPAGENT_EVOLUTION_POLL_INTERVAL_S": "0.2",
        "POPAGENT_EVOLUTION_SIGNAL_DELAY_S": "0",
        "POPAGENT_EVOLUTION_RETRY_BASE_S": "0.5",
        "POPAGENT_EVOLUTION_RETRY_CAP_S": "1",
        "POPAGENT_EVOLUTION_MAX_ATTEMPTS": "2",
        "POPAGENT_EVOLUTION_ACK_WAIT_S": "2",
    },
)


@dataclass
class Stack:
    spec: StackSpec
    dsn: str
    nats_url: str
    tokens: dict[str, str]
    workspace_root: Path
    receiver: HttpsReceiver
    models: ModelGateway
    # webSearch's SearXNG and the pages webFetch reads (agent-runner may fetch private addresses).
    searxng: SearxngStandIn
    pages: PageServer
    runner_workers: list[str]
    # agent-runner's state service, called as evolution (a caller that may change runtime settings).
    state: agent_runner_pb2_grpc.AgentRunnerStateServiceStub
    gateway_env: dict[str, Any]  # empty without a gateway
    gateway_url: str | None
    task_stub: tasks_pb2_grpc.TasksServiceStub | None
    running_tasks: RunningTasks | None
    runner_env: dict[str, Any] = field(default_factory=dict[str, Any])  # the first agent-runner worker's settings
    evolution_env: dict[str, Any] = field(default_factory=dict[str, Any])  # empty without evolution
    # The stack's evolution process-equivalent (its learning worker can be stopped and started).
    evolution_running: RunningEvolution | None = None

    @property
    def url(self) -> str:
        assert self.gateway_url is not None, f"the {self.spec.name} stack runs no gateway"
        return self.gateway_url

    @property
    def runner_address(self) -> str:
        return self.runner_workers[0]

    @property
    def tasks(self) -> tasks_pb2_grpc.TasksServiceStub:
        """The tasks service, called as evolution (a caller that may create self-update tasks)."""
        assert self.task_stub is not None, f"the {self.spec.name} stack runs no tasks service"
        return self.task_stub

    @property
    def running(self) -> RunningTasks:
        assert self.running_tasks is not None, f"the {self.spec.name} stack runs no tasks service"
        return self.running_tasks

    def client(self, **kwargs: Any) -> httpx.AsyncClient:
        headers = {"x-popagent-key": API_KEY, **kwargs.pop("headers", {})}
        # An idle connection is dropped well before the gateway closes it (its idle timeout, 5 s): with
        # httpx's default expiry of the same 5 s, a request sent on a connection the server was just
        # closing failed with a ReadError.
        kwargs.setdefault("limits", httpx.Limits(keepalive_expiry=2.0))
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=30.0, **kwargs)

    def reset(self) -> None:
        """Every hook path answers pass and records afresh; the model script is empty."""
        for path, _ in self.spec.hook_paths.values():
            self.receiver.script(path, answer("pass"))
        self.receiver.requests.clear()
        self.models.reset()
        self.searxng.reset()
        self.pages.reset()

    def hook_requests(self, event: str) -> list[dict[str, Any]]:
        path = self.spec.hook_paths[event][0]
        return [request.json() for request in self.receiver.requests_for(path)]

    @contextlib.asynccontextmanager
    async def db(self, schema: str = "agent_runner") -> AsyncIterator[asyncpg.Connection]:
        conn = await asyncpg.connect(self.dsn, server_settings={"search_path": schema})
        try:
            yield conn
        finally:
            await conn.close()

    @contextlib.asynccontextmanager
    async def runner_stub(self) -> AsyncIterator[agent_runner_pb2_grpc.AgentRunnerStateServiceStub]:
        """A direct gRPC stub to agent-runner, authenticated as the gateway."""
        async with open_channel(self.runner_address, self.tokens["gateway"]) as channel:
            yield agent_runner_pb2_grpc.AgentRunnerStateServiceStub(channel)

    @contextlib.asynccontextmanager
    async def extra_runner(self, address: str = "") -> AsyncIterator[str]:
        """Another agent-runner worker over the same database and services (at `address`, else a free
        port); yields its address. It announces itself, so the gateway sends turns to it too.
        Leaving the block stops it as SIGTERM would (the service's own unwinding)."""
        address = address or f"127.0.0.1:{free_port()}"
        async with build_agent_runner(
            AgentRunnerSettings(**{**self.runner_env, "POPAGENT_AGENT_RUNNER_ADDR": address})
        ):
            yield address

    @contextlib.asynccontextmanager
    async def learning_paused(self) -> AsyncIterator[None]:
        """The stack's learning worker stopped for the block (signals are still ingested, none is
        claimed), then started again."""
        worker = self.evolution_running.worker if self.evolution_running is not None else None
        assert worker is not None, f"the {self.spec.name} stack runs no evolution worker"
        await worker.stop()
        try:
            yield
        finally:
            await worker.start()

    @contextlib.asynccontextmanager
    async def extra_evolution(self, **overrides: Any) -> AsyncIterator[RunningEvolution]:
        """Another evolution process-equivalent over the same database, NATS and model."""
        assert self.evolution_env, f"the {self.spec.name} stack runs no evolution"
        env = {**self.evolution_env, "POPAGENT_EVOLUTION_ADDR": f"127.0.0.1:{free_port()}", **overrides}
        async with build_evolution(EvolutionSettings(**env)) as running:
            yield running

    @contextlib.asynccontextmanager
    async def extra_gateway(self, **overrides: Any) -> AsyncIterator[str]:
        """Another gateway process-equivalent over the same services, with other settings."""
        assert self.gateway_env, f"the {self.spec.name} stack runs no gateway"
        async with serve_gateway(GatewaySettings(**{**self.gateway_env, **overrides})) as url:
            yield url

    async def create_task(self, prompt: str, **fields: Any) -> str:
        task = await self.tasks.CreateTask(
            tpb.CreateTaskRequest(prompt=prompt, model=MODEL, workspace_id="popagent", **fields)
        )
        return task.id

    async def get_task(self, task_id: str) -> tpb.Task:
        return await self.tasks.GetTask(tpb.GetTaskRequest(id=task_id))

    async def wait_task(self, task_id: str, *statuses: str, within: float = 20.0) -> tpb.Task:
        """The task once it is in one of `statuses` and no worker holds it (its TaskStop is out)."""

        def settled(task: tpb.Task) -> bool:
            worker = self.running.worker
            held = worker is not None and any(str(key) == task_id for key in worker.slots)
            return task.status in statuses and not held

        return await eventually(
            lambda: self.get_task(task_id), until=settled, within=within, what=f"task {task_id} to be {statuses}"
        )


@contextlib.asynccontextmanager
async def start_stack(
    pg_dsn: str, credentials: tuple[dict[str, str], str], base: Path, spec: StackSpec
) -> AsyncIterator[Stack]:
    """Every service `spec` names, on a fresh database, a private NATS and free ports."""
    tokens, callers = credentials
    workspace_root = base / "workspace"
    (workspace_root / "popagent").mkdir(parents=True)
    runner_workers = [f"127.0.0.1:{free_port()}" for _ in range(spec.runner_workers)]
    # A service the stack does not run gets an address where nothing listens: the routes
    # that call it are not part of the suite, and best-effort calls (session deletion's
    # browser-bridge cleanup) tolerate it.
    addresses = {name: f"127.0.0.1:{free_port()}" for name in ("hooks", *sorted(OPTIONAL_SERVICES - {"gateway"}))}
    addresses["agent-runner"] = ",".join(runner_workers)
    # A private broker: the hooks service's durable consumer names are fixed, so sharing the
    # worker's NATS with other hook tests would split their events between them.
    nats = embedded.start_nats(base / "nats")
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(nats.stop)
        dsn = await stack.enter_async_context(fresh_database(pg_dsn, f"popagent_{spec.name}"))
        (base / "receiver").mkdir()
        receiver = await stack.enter_async_context(HttpsReceiver(base / "receiver"))
        models = await stack.enter_async_context(ModelGateway(models=CATALOG, api_key=MODELS_API_KEY))
        searxng = await stack.enter_async_context(SearxngStandIn())
        pages = await stack.enter_async_context(PageServer())
        common: dict[str, Any] = {"DATABASE_URL": dsn, "NATS_URL": nats.url, "POPAGENT_INTERNAL_CALLERS": callers}

        def settings_of(service: str, **values: Any) -> dict[str, Any]:
            return {**common, "POPAGENT_INTERNAL_TOKEN": tokens[service], **values}

        await stack.enter_async_context(
            serve_hooks(common, tokens["hooks"], addresses["hooks"], receiver, spec.hook_paths)
        )
        evolution_env: dict[str, Any] = {}
        evolution_running: RunningEvolution | None = None
        if "evolution" in spec.services:
            evolution_env = settings_of(
                "evolution",
                POPAGENT_EVOLUTION_ADDR=addresses["evolution"],
                POPAGENT_AGENT_RUNNER_ADDR=addresses["agent-runner"],
                NINEROUTER_URL=models.url,
                NINEROUTER_API_KEY=MODELS_API_KEY,
                **spec.evolution,
            )
            evolution_running = await stack.enter_async_context(build_evolution(EvolutionSettings(**evolution_env)))
        if "secrets" in spec.services:
            secrets_settings = settings_of(
                "secrets",
                POPAGENT_SECRETS_ADDR=addresses["secrets"],
                POPAGENT_SECRET_KEY=base64.b64encode(os.urandom(32)).decode(),
            )
            await stack.enter_async_context(build_secrets(SecretsSettings(**secrets_settings)))
        if "browser-bridge" in spec.services:
            bridge_settings = settings_of(
                "browser-bridge",
                POPAGENT_BROWSER_BRIDGE_ADDR=addresses["browser-bridge"],
                POPAGENT_SECRETS_ADDR=addresses["secrets"],
                POPAGENT_BROWSER_PROFILES_DIR=str(base / "browser-profiles"),
                **spec.bridge_env,
            )
            await stack.enter_async_context(build_browser_bridge(BrowserBridgeSettings(**bridge_settings)))
        runner_env: dict[str, Any] = {}
        for worker in runner_workers:
            runner_settings = settings_of(
                "agent-runner",
                POPAGENT_AGENT_RUNNER_ADDR=worker,
                POPAGENT_HOOKS_ADDR=addresses["hooks"],
                POPAGENT_BROWSER_BRIDGE_ADDR=addresses["browser-bridge"],
                POPAGENT_EVOLUTION_ADDR=addresses["evolution"],
                POPAGENT_SECRETS_ADDR=addresses["secrets"],
                POPAGENT_WORKSPACE_ROOT=str(workspace_root),
                NINEROUTER_URL=models.url,
                NINEROUTER_API_KEY=MODELS_API_KEY,
                SEARXNG_URL=searxng.base,
                POPAGENT_WEB_FETCH_ALLOW_PRIVATE_ADDRESSES="true",
                POPAGENT_DOCS_EMBEDDING_MODEL=EMBEDDING_MODEL,
                **spec.runner_settings,
            )
            runner_env = runner_env or runner_settings
            await stack.enter_async_context(build_agent_runner(AgentRunnerSettings(**runner_settings)))
        state_channel = await stack.enter_async_context(open_channel(runner_workers[0], tokens["evolution"]))
        state = agent_runner_pb2_grpc.AgentRunnerStateServiceStub(state_channel)
        if spec.runtime:
            updated = await state.UpdateAgentRuntimeSettings(arpb.UpdateAgentRuntimeSettingsRequest(**spec.runtime))
            assert not updated.violations, updated.violations
        running_tasks: RunningTasks | None = None
        task_stub: tasks_pb2_grpc.TasksServiceStub | None = None
        if "tasks" in spec.services:
            tasks_settings = settings_of(
                "tasks",
                POPAGENT_TASKS_ADDR=addresses["tasks"],
                POPAGENT_HOOKS_ADDR=addresses["hooks"],
                POPAGENT_AGENT_RUNNER_ADDR=addresses["agent-runner"],
                POPAGENT_TASKS_EXECUTOR="popagent_tasks.agent_runner_executor:executor",
                POPAGENT_BROWSER_BRIDGE_ADDR=addresses["browser-bridge"],
                POPAGENT_TASKS_BROWSER_CLOSE_ENABLED=str("browser-bridge" in spec.services).lower(),
                # Deliberately slow: the worker must not use these when agent-runner answers.
                POPAGENT_TASKS_RETRY_BASE_S="60",
                POPAGENT_TASKS_RETRY_CAP_S="120",
                POPAGENT_TASKS_SWEEP_INTERVAL_S="0.5",
                POPAGENT_EVOLUTION_ADDR=addresses["evolution"],
                # The self-update scheduler reads the autonomy settings from evolution.
                POPAGENT_TASKS_SELF_UPDATE_SCHEDULER_ENABLED=str("evolution" in spec.services).lower(),
            )
            running_tasks = await stack.enter_async_context(
                build_tasks(TasksSettings(**tasks_settings), extra_observers=spec.task_observers)
            )
            # As evolution: a caller other than the gateway may create self-update tasks.
            tasks_channel = await stack.enter_async_context(open_channel(addresses["tasks"], tokens["evolution"]))
            task_stub = tasks_pb2_grpc.TasksServiceStub(tasks_channel)
        gateway_env: dict[str, Any] = {}
        gateway_url: str | None = None
        if "gateway" in spec.services:
            # The observability store is a database of its own, as in production.
            observability_dsn = await stack.enter_async_context(fresh_database(pg_dsn, f"popagent_{spec.name}_obs"))
            gateway_env = {
                "DATABASE_URL": dsn,
                "OBSERVABILITY_DATABASE_URL": observability_dsn,
                "NATS_URL": nats.url,
                "POPAGENT_API_KEY": API_KEY,
                "POPAGENT_INTERNAL_TOKEN": tokens["gateway"],
                "NINEROUTER_URL": models.url,
                "POPAGENT_AGENT_RUNNER_ADDR": addresses["agent-runner"],
                "POPAGENT_HOOKS_ADDR": addresses["hooks"],
                "POPAGENT_EVOLUTION_ADDR": addresses["evolution"],
                "POPAGENT_BROWSER_BRIDGE_ADDR": addresses["browser-bridge"],
                "POPAGENT_TASKS_ADDR": addresses["tasks"],
                "POPAGENT_SECRETS_ADDR": addresses["secrets"],
            }
            gateway_url = await stack.enter_async_context(serve_gateway(GatewaySettings(**gateway_env)))
            if "secrets" in spec.services:
                # Every answer the stack gives (fuzzed ones included) can be checked for it.
                # httpx's 5 s default is short for a stack's first request on a loaded machine.
                async with httpx.AsyncClient(
                    base_url=gateway_url, headers={"x-popagent-key": API_KEY}, timeout=60
                ) as client:
                    body = {"resourceId": CANARY_RESOURCE, "name": CANARY_NAME, "value": CANARY}
                    (await client.post("/api/secrets", json=body)).raise_for_status()
        yield Stack(
            spec=spec,
            dsn=dsn,
            nats_url=nats.url,
            tokens=tokens,
            workspace_root=workspace_root,
            receiver=receiver,
            models=models,
            searxng=searxng,
            pages=pages,
            runner_workers=runner_workers,
            state=state,
            gateway_env=gateway_env,
            gateway_url=gateway_url,
            task_stub=task_stub,
            running_tasks=running_tasks,
            runner_env=runner_env,
            evolution_env=evolution_env,
            evolution_running=evolution_running,
        )
