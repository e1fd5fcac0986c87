"""Helpers of the gateway tests: a scripted agent-runner on real gRPC, and the turn events it streams."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import grpc

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from popagent.agent_runner.v1 import agent_runner_pb2_grpc

API_KEY = "c" * 32
USER_MESSAGE = {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hello"}]}

Script = Callable[[pb.ChatRequest, grpc.aio.ServicerContext], AsyncIterator[pb.TurnEventBatch]]


@dataclass
class ScriptedRunner(agent_runner_pb2_grpc.AgentRunnerServiceServicer):
    script: Script | None = None
    requests: list[pb.ChatRequest] = field(default_factory=list)
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)

    async def Chat(self, request: pb.ChatRequest, context: grpc.aio.ServicerContext):  # type: ignore[override]
        self.requests.append(request)
        assert self.script is not None
        try:
            async for batch in self.script(request, context):
                yield batch
        except asyncio.CancelledError:
            self.cancelled.set()
            raise


@dataclass
class Harness:
    runner: ScriptedRunner
    url: str


def batch(*events: pb.TurnEvent) -> pb.TurnEventBatch:
    return pb.TurnEventBatch(events=list(events))


def start(turn_id: str = "turn-1") -> pb.TurnEvent:
    return pb.TurnEvent(start=pb.TurnStart(turn_id=turn_id, message_id="a1", model="fake/fake-chat"))
