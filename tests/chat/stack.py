"""The real chat stack for the chat tests, built once per test session (per xdist worker).

In one event loop: the hooks service (with a handler for every event the turn
dispatches, each on its own path of a real HTTPS receiver), agent-runner as two workers
(as `make run` starts it) with its chat turn pointed at the scripted model server over real
HTTP, and the gateway app served by
uvicorn, on a fresh database and a private NATS server. Tests talk HTTP to the gateway,
script the model server and the hook receiver, and read the database to check what the
turn stored.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from popagent_agent_runner.service import build as build_agent_runner
from popagent_agent_runner.settings import Settings as AgentRunnerSettings
from popagent_dev import embedded
from popagent_dev.embedded import free_port
from popagent_gateway.settings import Settings as GatewaySettings
from support.https_receiver import HttpsReceiver, answer
from support.model_gateway import ModelGateway, ModelInfo
from support.stacks import fresh_database, serve_gateway, serve_hooks

API_KEY = "chat-tests-api-key-" + "k" * 16
MODEL = "fake/fake-chat"
CATALOG = (
    ModelInfo(MODEL),
    ModelInfo("cx/gpt-5.3-codex"),
    ModelInfo("cx/gpt-5.3-codex-spark"),
)
SPECIALISTS = ("researcher", "implementer", "reviewer")

# Every hook event the chat turn dispatches -> (receiver path, matcher or None).
HOOK_PATHS: dict[str, tuple[str, list[str] | None]] = {
    "SessionStart": ("/session-start", None),
    "UserPromptSubmit": ("/prompt", None),
    # No handler matches `remember`: its calls must cost no hook RPC at all.
    "PreToolUse": ("/pre-tool", ["getTime", "mastra_workspace_write_file", *SPECIALISTS]),
    "PostToolUse": ("/post-tool", None),
    "PostToolUseFailure": ("/post-tool-failure", None),
    "SubagentStart": ("/subagent-start", None),
    "SubagentStop": ("/subagent-stop", None),
    "Stop": ("/stop", None),
    "StopFailure": ("/stop-failure", None),
}


@dataclass
class ChatStack:
    url: str
    dsn: str
    receiver: HttpsReceiver
    models: ModelGateway
    runner_address: str
    runner_workers: list[str]
    tokens: dict[str, str]
    nats_url: str
    workspace_root: Path

    def client(self, **kwargs: Any) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.url, headers={"x-popagent-key": API_KEY}, timeout=httpx.Timeout(30.0), **kwargs
        )

    def reset(self) -> None:
        """Every hook path answers pass and records afresh; the model script is empty."""
        for path, _ in HOOK_PATHS.values():
            self.receiver.script(path, answer("pass"))
        self.receiver.requests.clear()
        self.models.requests.clear()
        self.models.responder = None
        # A failed test may leave turns queued; the next test must not get them.
        self.models._turns.clear()  # pyright: ignore[reportPrivateUsage]

    def hook_requests(self, event: str) -> list[dict[str, Any]]:
        path = HOOK_PATHS[event][0]
        return [request.json() for request in self.receiver.requests_for(path)]

    @contextlib.asynccontextmanager
    async def db(self) -> AsyncIterator[asyncpg.Connection]:
        conn = await asyncpg.connect(self.dsn, server_settings={"search_path": "agent_runner"})
        try:
            yield conn
        finally:
            await conn.close()


@contextlib.asynccontextmanager
async def start_chat_stack(
    pg_dsn: str, credentials: tuple[dict[str, str], str], base: Path
) -> AsyncIterator[ChatStack]:
    tokens, callers = credentials
    workspace_root = base / "workspace"
    (workspace_root / "popagent").mkdir(parents=True)
    addresses = {name: f"127.0.0.1:{free_port()}" for name in ("agent-runner", "agent-runner-2", "hooks")}
    runner_workers = [addresses["agent-runner"], addresses["agent-runner-2"]]
    # A private broker: the hooks service's durable consumer names are fixed.
    nats = embedded.start_nats(base / "nats")
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(nats.stop)
        dsn = await stack.enter_async_context(fresh_database(pg_dsn, "popagent_chat"))
        (base / "receiver").mkdir()
        receiver = await stack.enter_async_context(HttpsReceiver(base / "receiver"))
        models = await stack.enter_async_context(ModelGateway(models=CATALOG, api_key="sk-chat-tests"))
        common: dict[str, Any] = {"DATABASE_URL": dsn, "NATS_URL": nats.url, "POPAGENT_INTERNAL_CALLERS": callers}
        await stack.enter_async_context(serve_hooks(common, tokens["hooks"], addresses["hooks"], receiver, HOOK_PATHS))
        for worker in runner_workers:
            await stack.enter_async_context(
                build_agent_runner(
                    AgentRunnerSettings(
                        **{
                            **common,
                            "POPAGENT_INTERNAL_TOKEN": tokens["agent-runner"],
                            "POPAGENT_AGENT_RUNNER_ADDR": worker,
                            "POPAGENT_HOOKS_ADDR": addresses["hooks"],
                            # Nothing listens there: session deletion tolerates it (best effort).
                            "POPAGENT_BROWSER_BRIDGE_ADDR": f"127.0.0.1:{free_port()}",
                            "POPAGENT_WORKSPACE_ROOT": str(workspace_root),
                            "NINEROUTER_URL": models.url,
                            "NINEROUTER_API_KEY": "sk-chat-tests",
                        }
                    )
                )
            )
        unused = f"127.0.0.1:{free_port()}"
        gateway_env: dict[str, Any] = {
            "DATABASE_URL": dsn,
            "OBSERVABILITY_DATABASE_URL": dsn,
            "POPAGENT_API_KEY": API_KEY,
            "POPAGENT_INTERNAL_TOKEN": tokens["gateway"],
            "NINEROUTER_URL": models.url,
            "POPAGENT_AGENT_RUNNER_ADDR": ",".join(runner_workers),
            "POPAGENT_HOOKS_ADDR": addresses["hooks"],
            "POPAGENT_EVOLUTION_ADDR": unused,
            "POPAGENT_BROWSER_BRIDGE_ADDR": unused,
            "POPAGENT_TASKS_ADDR": unused,
            "POPAGENT_SECRETS_ADDR": unused,
        }
        url = await stack.enter_async_context(serve_gateway(GatewaySettings(**gateway_env)))
        yield ChatStack(
            url=url,
            dsn=dsn,
            receiver=receiver,
            models=models,
            runner_address=addresses["agent-runner"],
            runner_workers=runner_workers,
            tokens=tokens,
            nats_url=nats.url,
            workspace_root=workspace_root,
        )
