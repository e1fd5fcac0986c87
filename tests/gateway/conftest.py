"""Fixtures of the gateway tests: a scripted agent-runner on real gRPC behind the real gateway app on real HTTP."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

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


@pytest.fixture
async def harness(internal_credentials: tuple[dict[str, str], str]) -> AsyncIterator[Harness]:
    async with serving_harness(internal_credentials) as served:
        yield served


@pytest.fixture(scope="module")
async def refusing_harness(internal_credentials: tuple[dict[str, str], str]) -> AsyncIterator[Harness]:
    """One harness for a module's tests whose requests the gateway refuses before any call to
    agent-runner (each asserts that none reached it): they leave nothing behind for the next."""
    async with serving_harness(internal_credentials) as served:
        yield served
