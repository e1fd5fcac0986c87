"""The real stack for the HTTP API tests, started once per test session (per xdist worker).

In one event loop: agent-runner, hooks, evolution and browser-bridge built from their
own `build(Settings(...))` with gRPC on free ports, a fresh database and a private
NATS server, a real HTTPS hook receiver (SessionEnd is configured), the scripted model
gateway for the catalog, and the gateway app served by uvicorn on a free port. Tests
talk HTTP to the gateway, and may use the database or a direct gRPC channel to check
what the services did.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from popagent.agent_runner.v1 import agent_runner_pb2_grpc
from popagent_agent_runner.service import build as build_agent_runner
from popagent_agent_runner.settings import Settings as AgentRunnerSettings
from popagent_browser_bridge.service import build as build_browser_bridge
from popagent_browser_bridge.settings import Settings as BrowserBridgeSettings
from popagent_core.grpc_client import open_channel
from popagent_dev import embedded
from popagent_dev.embedded import free_port
from popagent_evolution.service import build as build_evolution
from popagent_evolution.settings import Settings as EvolutionSettings
from popagent_gateway.settings import Settings as GatewaySettings
from popagent_hooks.service import build as build_hooks
from popagent_hooks.settings import Settings as HooksSettings
from popagent_secrets.service import build as build_secrets
from popagent_secrets.settings import Settings as SecretsSettings
from support.canary import CANARY
from support.https_receiver import HttpsReceiver, answer, make_secret
from support.model_gateway import ModelGateway, ModelInfo
from support.stacks import fresh_database, serve_gateway

API_KEY = "api-key-for-tests-" + "x" * 16
CATALOG = (
    ModelInfo("fake/fake-chat", context_length=128_000),
    ModelInfo("cx/gpt-5.3-codex", context_length=400_000),
    ModelInfo("cx/gpt-5.3-codex-spark", context_length=128_000),
)
SESSION_END_PATH = "/session-end"


CANARY_RESOURCE = "canary"
CANARY_NAME = "session-canary"


@dataclass
class ApiStack:
    url: str
    dsn: str
    workspace_root: Path
    tokens: dict[str, str]
    runner_address: str
    receiver: HttpsReceiver
    models: ModelGateway
    gateway_env: dict[str, Any]

    def client(self, **kwargs: Any) -> httpx.AsyncClient:
        headers = {"x-popagent-key": API_KEY, **kwargs.pop("headers", {})}
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=30.0, **kwargs)

    @contextlib.asynccontextmanager
    async def runner_stub(self) -> AsyncIterator[agent_runner_pb2_grpc.AgentRunnerStateServiceStub]:
        """A direct gRPC stub to agent-runner, authenticated as the gateway."""
        async with open_channel(self.runner_address, self.tokens["gateway"]) as channel:
            yield agent_runner_pb2_grpc.AgentRunnerStateServiceStub(channel)

    @contextlib.asynccontextmanager
    async def db(self, schema: str) -> AsyncIterator[asyncpg.Connection]:
        conn = await asyncpg.connect(self.dsn, server_settings={"search_path": schema})
        try:
            yield conn
        finally:
            await conn.close()

    @contextlib.asynccontextmanager
    async def extra_gateway(self, **overrides: Any) -> AsyncIterator[str]:
        """Another gateway process-equivalent over the same services, with other settings."""
        async with serve_gateway(GatewaySettings(**{**self.gateway_env, **overrides})) as url:
            yield url


@contextlib.asynccontextmanager
async def start_api_stack(pg_dsn: str, credentials: tuple[dict[str, str], str], base: Path) -> AsyncIterator[ApiStack]:
    """Every service this suite needs, on a fresh database, private NATS and free ports."""
    tokens, callers = credentials
    workspace_root = base / "workspace"
    (workspace_root / "popagent").mkdir(parents=True)
    addresses = {
        name: f"127.0.0.1:{free_port()}" for name in ("agent-runner", "hooks", "evolution", "browser-bridge", "secrets")
    }
    # A private broker: the hooks service's durable consumer name is fixed, so sharing the
    # worker's NATS with other hook tests would split session-deleted events between them.
    nats = embedded.start_nats(base / "nats")
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(nats.stop)
        dsn = await stack.enter_async_context(fresh_database(pg_dsn, "popagent_api"))
        (base / "receiver").mkdir()
        receiver = await stack.enter_async_context(HttpsReceiver(base / "receiver"))
        receiver.script(SESSION_END_PATH, answer("pass"))
        models = await stack.enter_async_context(ModelGateway(models=CATALOG))
        common: dict[str, Any] = {"DATABASE_URL": dsn, "NATS_URL": nats.url, "POPAGENT_INTERNAL_CALLERS": callers}
        hooks_document = json.dumps(
            {
                "version": 1,
                "hooks": {
                    "SessionEnd": [
                        {
                            "id": "session-end-audit",
                            "type": "http",
                            "url": receiver.url(SESSION_END_PATH),
                            "secret": make_secret(),
                        }
                    ]
                },
            }
        )
        hooks_settings = HooksSettings(
            **{
                **common,
                "POPAGENT_INTERNAL_TOKEN": tokens["hooks"],
                "POPAGENT_HOOKS_ADDR": addresses["hooks"],
                "POPAGENT_HOOK_ALLOWED_HOSTS": "127.0.0.1",
                "POPAGENT_HOOK_ALLOW_PRIVATE_ADDRESSES": "true",
                "POPAGENT_HOOK_CA_FILE": str(receiver.ca_file),
                "POPAGENT_HOOKS": hooks_document,
            }
        )
        await stack.enter_async_context(build_hooks(hooks_settings))
        await stack.enter_async_context(
            build_evolution(
                EvolutionSettings(
                    **{
                        **common,
                        "POPAGENT_INTERNAL_TOKEN": tokens["evolution"],
                        "POPAGENT_EVOLUTION_ADDR": addresses["evolution"],
                    }
                )
            )
        )
        await stack.enter_async_context(
            build_secrets(
                SecretsSettings(
                    **{
                        **common,
                        "POPAGENT_INTERNAL_TOKEN": tokens["secrets"],
                        "POPAGENT_SECRETS_ADDR": addresses["secrets"],
                        "POPAGENT_SECRET_KEY": base64.b64encode(os.urandom(32)).decode(),
                    }
                )
            )
        )
        await stack.enter_async_context(
            build_browser_bridge(
                BrowserBridgeSettings(
                    **{
                        **common,
                        "POPAGENT_INTERNAL_TOKEN": tokens["browser-bridge"],
                        "POPAGENT_BROWSER_BRIDGE_ADDR": addresses["browser-bridge"],
                    }
                )
            )
        )
        await stack.enter_async_context(
            build_agent_runner(
                AgentRunnerSettings(
                    **{
                        **common,
                        "POPAGENT_INTERNAL_TOKEN": tokens["agent-runner"],
                        "POPAGENT_AGENT_RUNNER_ADDR": addresses["agent-runner"],
                        "POPAGENT_HOOKS_ADDR": addresses["hooks"],
                        "POPAGENT_BROWSER_BRIDGE_ADDR": addresses["browser-bridge"],
                        "POPAGENT_WORKSPACE_ROOT": str(workspace_root),
                    }
                )
            )
        )
        gateway_env: dict[str, Any] = {
            "DATABASE_URL": dsn,
            "OBSERVABILITY_DATABASE_URL": dsn,
            "POPAGENT_API_KEY": API_KEY,
            "POPAGENT_INTERNAL_TOKEN": tokens["gateway"],
            "NINEROUTER_URL": models.url,
            "POPAGENT_AGENT_RUNNER_ADDR": addresses["agent-runner"],
            "POPAGENT_HOOKS_ADDR": addresses["hooks"],
            "POPAGENT_EVOLUTION_ADDR": addresses["evolution"],
            "POPAGENT_BROWSER_BRIDGE_ADDR": addresses["browser-bridge"],
            # Nothing listens there: these routes are not part of this suite.
            "POPAGENT_TASKS_ADDR": f"127.0.0.1:{free_port()}",
            "POPAGENT_SECRETS_ADDR": addresses["secrets"],
        }
        url = await stack.enter_async_context(serve_gateway(GatewaySettings(**gateway_env)))
        # The session's canary lives in the stack as a real secret, so every answer the
        # stack gives (fuzzed ones included) can be checked for it.
        async with httpx.AsyncClient(base_url=url, headers={"x-popagent-key": API_KEY}) as client:
            provisioned = await client.post(
                "/api/secrets", json={"resourceId": CANARY_RESOURCE, "name": CANARY_NAME, "value": CANARY}
            )
            provisioned.raise_for_status()
        yield ApiStack(
            url=url,
            dsn=dsn,
            workspace_root=workspace_root,
            tokens=tokens,
            runner_address=addresses["agent-runner"],
            receiver=receiver,
            models=models,
            gateway_env=gateway_env,
        )


@pytest.fixture(scope="session")
async def api_stack(
    pg_dsn: str, internal_credentials: tuple[dict[str, str], str], tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[ApiStack]:
    async with start_api_stack(pg_dsn, internal_credentials, tmp_path_factory.mktemp("api-stack")) as stack:
        yield stack


@pytest.fixture
async def client(api_stack: ApiStack) -> AsyncIterator[httpx.AsyncClient]:
    async with api_stack.client() as http:
        yield http


async def eventually(check: Any, timeout_s: float = 10.0, interval_s: float = 0.05) -> Any:
    """Poll an async predicate until it returns a truthy value."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        value = await check()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met within {timeout_s} s (last value {value!r})")
        await asyncio.sleep(interval_s)
