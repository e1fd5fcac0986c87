"""Helpers of the gateway tests: a scripted agent-runner on real gRPC, and the turn events it streams."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import grpc
import httpx
from starlette.types import Receive, Scope, Send

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from popagent.agent_runner.v1 import agent_runner_pb2_grpc
from popagent_gateway.bounded import ApiKeyMiddleware
from popagent_gateway.settings import Settings

API_KEY = "c" * 32
# POPAGENT_GATEWAY_RPC_TIMEOUT_S of the harness: short, so a test can outlast it, yet long enough for
# a first call while the suite loads both cores (0.3 s was not, once, in CI; 1.0 s was not, once,
# in a full local run).
RPC_TIMEOUT_S = 2.0
USER_MESSAGE = {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hello"}]}


def offline_settings(api_key: str, **overrides: object) -> Settings:
    """Gateway settings with nothing behind them (no database answers) and, unless overridden, no
    built UI: routes a test adds after create_app are not shadowed by the UI at /."""
    values: dict[str, object] = {
        "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
        "OBSERVABILITY_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
        "POPAGENT_API_KEY": api_key,
        "POPAGENT_UI_DIR": "/nonexistent/popagent-ui",
    }
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


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


# What the scripted agent-runner says of its sandbox: like a container without user namespaces.
SANDBOX_UNAVAILABLE = "sandbox unavailable: bwrap: No permissions to create new namespace"


class ScriptedState(agent_runner_pb2_grpc.AgentRunnerStateServiceServicer):
    """What the chat route reads before a turn (the agents, no overrides, and the default model),
    and a workspace shell whose sandbox cannot be built."""

    async def ListAgents(
        self, request: pb.ListAgentsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListAgentsResponse:
        return pb.ListAgentsResponse(agents=[pb.Agent(id="popagent")])

    async def GetAgentRuntimeSettings(
        self, request: pb.GetAgentRuntimeSettingsRequest, context: grpc.aio.ServicerContext
    ) -> pb.AgentRuntimeSettings:
        return pb.AgentRuntimeSettings(default_model="fake/fake-chat")

    async def GetSandboxStatus(
        self, request: pb.GetSandboxStatusRequest, context: grpc.aio.ServicerContext
    ) -> pb.SandboxStatus:
        return pb.SandboxStatus(available=False, reason=SANDBOX_UNAVAILABLE)


@dataclass
class Harness:
    runner: ScriptedRunner
    url: str


def batch(*events: pb.TurnEvent) -> pb.TurnEventBatch:
    return pb.TurnEventBatch(events=list(events))


def start(turn_id: str = "turn-1") -> pb.TurnEvent:
    return pb.TurnEvent(start=pb.TurnStart(turn_id=turn_id, message_id="a1", model="fake/fake-chat"))


async def _reached(scope: Scope, receive: Receive, send: Send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"reached"})


async def key_guard_status(key: str, path: str, headers: dict[str, str]) -> int:
    """What `ApiKeyMiddleware` alone answers a POST to `path` with (200: it let the request through)."""
    transport = httpx.ASGITransport(app=ApiKeyMiddleware(_reached, api_key=key))
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
        return (await client.post(path, headers=headers)).status_code
