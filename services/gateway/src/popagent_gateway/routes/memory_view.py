"""/api/sessions/:id/memory: the session's observational memory (its observation log, last compaction, tokens saved)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request

from popagent.agent_runner.v1 import memory_pb2 as pb
from popagent.agent_runner.v1 import memory_pb2_grpc
from popagent_gateway.deps import on_session_runner
from popagent_gateway.dto.memory_view import ObservationEntryOut, SessionMemoryOut
from popagent_gateway.dto.sessions import ID_PATTERN

router = APIRouter(tags=["sessions"])

SessionId = Annotated[str, Path(pattern=ID_PATTERN, max_length=128)]


@router.get("/sessions/{session_id}/memory", response_model=SessionMemoryOut)
async def session_memory(session_id: SessionId, request: Request) -> SessionMemoryOut:
    """The session's observation log (current generation), when it last changed and how many tokens it saves."""
    asked = pb.GetSessionMemoryRequest(session_id=session_id)
    memory = await on_session_runner(
        request, session_id, memory_pb2_grpc.SessionMemoryServiceStub, lambda stub: stub.GetSessionMemory(asked)
    )
    return SessionMemoryOut(
        generation=memory.generation,
        entries=[
            ObservationEntryOut(
                kind="reflection" if e.kind == "reflection" else "observation",
                content=e.content,
                tokens=e.tokens,
                message_tokens=e.message_tokens,
                active=e.active,
                created_at=e.created_at,
            )
            for e in memory.entries
        ],
        last_compaction_at=memory.last_compaction_at or None,
        observed_message_tokens=memory.observed_message_tokens,
        observation_tokens=memory.observation_tokens,
        tokens_saved=max(0, memory.observed_message_tokens - memory.observation_tokens),
        raw_messages=memory.raw_messages,
        raw_tokens=memory.raw_tokens,
    )
