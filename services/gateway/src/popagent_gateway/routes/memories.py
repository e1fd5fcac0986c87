"""/api/memories: long-term memories, kept across sessions and recalled into every turn.

A memory is one fact or preference (`kind`). The agent writes them with its `remember` tool
(restating a memory updates it); a user can add, correct, pin or delete them here. A pinned
memory is never changed by the agent and never ages out. They outlive the session that wrote them.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from popagent_gateway.deps import AgentRunnerStub
from popagent_gateway.dto.memories import MemoryCreate, MemoryListOut, MemoryListQuery, MemoryOut, MemoryPatch

router = APIRouter(prefix="/memories", tags=["memories"])

MemoryId = Annotated[str, Path(min_length=1, max_length=64)]


def memory_out(memory: pb.Memory) -> MemoryOut:
    return MemoryOut(
        id=memory.id,
        content=memory.content,
        source=memory.source,
        session_id=memory.session_id or None,
        created_at=memory.created_at,
        updated_at=memory.updated_at,
        kind="preference" if memory.kind == "preference" else "fact",
        pinned=memory.pinned,
    )


@router.get("", response_model=MemoryListOut)
async def list_memories(runner: AgentRunnerStub, query: Annotated[MemoryListQuery, Query()]) -> MemoryListOut:
    """Long-term memories, most recently changed first (at most 200), optionally searched."""
    response = await runner.ListMemories(pb.ListMemoriesRequest(query=query.q, limit=query.limit))
    return MemoryListOut(memories=[memory_out(m) for m in response.memories])


@router.post("", response_model=MemoryOut, status_code=201, responses={200: {"model": MemoryOut}})
async def create_memory(body: MemoryCreate, runner: AgentRunnerStub, response: Response) -> MemoryOut:
    """Remember a fact. An identical memory (ignoring case) is returned with 200 instead of a copy."""
    created = await runner.CreateMemory(
        pb.CreateMemoryRequest(content=body.content, kind=body.kind, pinned=body.pinned)
    )
    if not created.created:
        response.status_code = 200
    return memory_out(created.memory)


@router.patch("/{memory_id}", response_model=MemoryOut)
async def update_memory(memory_id: MemoryId, body: MemoryPatch, runner: AgentRunnerStub) -> MemoryOut:
    """Correct a memory's content, kind or pin; recall uses it from the next turn on."""
    memory = await runner.UpdateMemory(pb.UpdateMemoryRequest(id=memory_id, **body.changes()))
    return memory_out(memory)


@router.delete("/{memory_id}", status_code=204, response_class=Response)
async def delete_memory(memory_id: MemoryId, runner: AgentRunnerStub) -> Response:
    """Forget a memory for good."""
    await runner.DeleteMemory(pb.DeleteMemoryRequest(id=memory_id))
    return Response(status_code=204)
