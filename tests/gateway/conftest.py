"""Fixtures for gateway tests: a scripted agent-runner on real gRPC behind the real gateway app on real HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
import uvicorn

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from popagent.agent_runner.v1 import agent_runner_pb2_grpc
from popagent_core.auth import CallerRegistry
from popagent_core.grpc_server import create_server, running
from popagent_dev.embedded import free_port
from popagent_gateway.app import create_app
from popagent_gateway.settings import Settings

API_KEY = "c" * 32
# POPAGENT_GATEWAY_RPC_TIMEOUT_S of the harness: short, so a test can outlast it.
RPC_TIMEOUT_S = 0.3
USER_MESSAGE = {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hello"}]}

Script = Callable[[pb.ChatRequest, grpc.aio.ServicerContext], AsyncIterator[pb.TurnEventBatch]]


@dataclass
class ScriptedRunner(agent_runner_pb2_grpc.AgentRunnerServiceServicer):
    script: Script | None = None
    requests: list[pb.ChatRequest] = field(default_factory=list)
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    # How long the unary ListMemories takes to answer (an empty list).
    list_memories_delay_s: float = 0.0

    async def Chat(self, request: pb.ChatRequest, context: grpc.aio.ServicerContext):  # type: ignore[override]
        self.requests.append(request)
        assert self.script is not None
        try:
            async for batch in self.script(request, context):
                yield batch
        except asyncio.CancelledError:
            self.cancelled.set()
            raise

    async def ListMemories(
        self, request: pb.ListMemoriesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListMemoriesResponse:
        await asyncio.sleep(self.list_memories_delay_s)
        return pb.ListMemoriesResponse()


class ScriptedState(agent_runner_pb2_grpc.AgentRunnerStateServiceServicer):
    """What the chat route reads before a turn: the agents (no overrides) and the default model."""

    async def ListAgents(
        self, request: pb.ListAgentsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListAgentsResponse:
        return pb.ListAgentsResponse(agents=[pb.Agent(id="popagent")])

    async def GetAgentRuntimeSettings(
        self, request: pb.GetAgentRuntimeSettingsRequest, context: grpc.aio.ServicerContext
    ) -> pb.AgentRuntimeSettings:
        return pb.AgentRuntimeSettings(default_model="fake/fake-chat")


@dataclass
class Harness:
    runner: ScriptedRunner
    url: str


@pytest.fixture
async def harness(internal_credentials: tuple[dict[str, str], str]) -> AsyncIterator[Harness]:
    tokens, callers = internal_credentials
    runner = ScriptedRunner()
    server, health = create_server(CallerRegistry.from_json(callers))
    agent_runner_pb2_grpc.add_AgentRunnerServiceServicer_to_server(runner, server)
    agent_runner_pb2_grpc.add_AgentRunnerStateServiceServicer_to_server(ScriptedState(), server)
    grpc_port = free_port()
    http_port = free_port()
    environment: dict[str, Any] = {
        "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
        "OBSERVABILITY_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
        "POPAGENT_API_KEY": API_KEY,
        "POPAGENT_INTERNAL_TOKEN": tokens["gateway"],
        "POPAGENT_AGENT_RUNNER_ADDR": f"127.0.0.1:{grpc_port}",
        "POPAGENT_GATEWAY_RPC_TIMEOUT_S": str(RPC_TIMEOUT_S),
    }
    settings = Settings(**environment)
    config = uvicorn.Config(create_app(settings), host="127.0.0.1", port=http_port, log_config=None, lifespan="on")
    web = uvicorn.Server(config)
    async with running(server, health, f"127.0.0.1:{grpc_port}"):
        serving = asyncio.create_task(web.serve())
        while not web.started:  # noqa: ASYNC110 - uvicorn exposes a flag, not an event
            await asyncio.sleep(0.01)
        try:
            yield Harness(runner, f"http://127.0.0.1:{http_port}")
        finally:
            web.should_exit = True
            await serving
