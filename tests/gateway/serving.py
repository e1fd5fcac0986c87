"""The gateway tests' harness served: a scripted agent-runner on real gRPC behind the real gateway app on
real HTTP. Apart from harness.py, which a fresh interpreter imports (test_interop_loading) and which must
not load what the test stacks load."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from popagent.agent_runner.v1 import agent_runner_pb2_grpc
from popagent_core.auth import CallerRegistry
from popagent_core.grpc_server import create_server, running
from popagent_dev.embedded import free_port
from popagent_gateway.settings import Settings
from support.stacks import serve_gateway

from .harness import API_KEY, RPC_TIMEOUT_S, Harness, ScriptedRunner, ScriptedState


@contextlib.asynccontextmanager
async def serving_harness(internal_credentials: tuple[dict[str, str], str]) -> AsyncIterator[Harness]:
    tokens, callers = internal_credentials
    runner = ScriptedRunner()
    server, health = create_server(CallerRegistry.from_json(callers))
    agent_runner_pb2_grpc.add_AgentRunnerServiceServicer_to_server(runner, server)
    agent_runner_pb2_grpc.add_AgentRunnerStateServiceServicer_to_server(ScriptedState(), server)
    grpc_address = f"127.0.0.1:{free_port()}"
    environment: dict[str, Any] = {
        "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
        "OBSERVABILITY_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
        "POPAGENT_API_KEY": API_KEY,
        "POPAGENT_INTERNAL_TOKEN": tokens["gateway"],
        "POPAGENT_AGENT_RUNNER_ADDR": grpc_address,
        "POPAGENT_GATEWAY_RPC_TIMEOUT_S": str(RPC_TIMEOUT_S),
    }
    async with running(server, health, grpc_address), serve_gateway(Settings(**environment)) as url:
        yield Harness(runner, url)
