"""SessionMemoryService: a session's observation log as its memory view shows it (thin over ObservationStore)."""

from __future__ import annotations

import grpc

from popagent.agent_runner.v1 import memory_pb2 as pb
from popagent.agent_runner.v1 import memory_pb2_grpc
from popagent_agent_runner.memory.observational.store import ObservationStore
from popagent_core.errors import InvalidArgument, NotFound


class SessionMemoryServicer(memory_pb2_grpc.SessionMemoryServiceServicer):
    def __init__(self, store: ObservationStore) -> None:
        self.store = store

    async def GetSessionMemory(  # type: ignore[override]
        self, request: pb.GetSessionMemoryRequest, context: grpc.aio.ServicerContext
    ) -> pb.SessionMemory:
        if not request.session_id:
            raise InvalidArgument("session_id is required")
        if not await self.store.session_exists(request.session_id):
            raise NotFound(f"session {request.session_id!r} not found")
        state = await self.store.state(request.session_id)
        log = await self.store.log(request.session_id, state.generation)
        raw = await self.store.raw(request.session_id, state.observed_seq)
        active = [e for e in log if e.active]
        return pb.SessionMemory(
            generation=state.generation,
            entries=[
                pb.ObservationEntry(
                    kind=e.kind,
                    content=e.content,
                    tokens=e.tokens,
                    message_tokens=e.message_tokens,
                    active=e.active,
                    created_at=e.created_at.isoformat(),
                )
                for e in log
            ],
            last_compaction_at=state.last_compaction_at.isoformat() if state.last_compaction_at else "",
            observed_message_tokens=sum(e.message_tokens for e in active),
            observation_tokens=sum(e.tokens for e in active),
            raw_messages=len(raw),
            raw_tokens=sum(m.tokens for m in raw),
        )
