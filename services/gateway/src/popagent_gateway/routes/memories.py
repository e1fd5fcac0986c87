"""/api/memories: long-term memories, kept across sessions and recalled into every turn.

A memory is one fact or preference. The agent writes them with its `remember` tool; a
user can add, correct or delete them here. They outlive the session that wrote them.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response
from pydantic import BaseModel, ConfigDict, Field

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from popagent_gateway.deps import AgentRunnerStub
from popagent_gateway.dto import WireInput, WireModel

router = APIRouter(prefix="/memories", tags=["memories"])

MAX_CONTENT_CHARS = 2000
LIST_LIMIT = 200

Content = Annotated[str, Field(min_length=1, max_length=MAX_CONTENT_CHARS, description="one fact or preference")]
MemoryId = Annotated[str, Path(min_length=1, max_length=64)]


class MemoryOut(WireModel):
    id: str
    content: str
    source: str = Field(description="user (this API) or agent (the remember tool)")
    session_id: str | None = Field(description="the session that wrote it, if any (provenance only)")
    created_at: str
    updated_at: str


class MemoryListOut(WireModel):
    memories: list[MemoryOut]


class MemoryListQuery(BaseModel):
    """Query of GET /api/memories; unknown parameters are refused."""

    model_config = ConfigDict(extra="forbid")

    q: str = Field(default="", max_length=500, description="full-text search (web-search syntax)")
    limit: int = Field(default=LIST_LIMIT, ge=1, le=LIST_LIMIT)


class MemoryCreate(WireInput):
    content: Content


class MemoryPatch(WireInput):
    content: Content


def memory_out(memory: pb.Memory) -> MemoryOut:
    return MemoryOut(
        id=memory.id,
        content=memory.content,
        source=memory.source,
        session_id=memory.session_id or None,
        created_at=memory.created_at,
        updated_at=memory.updated_at,
    )


@router.get("", response_model=MemoryListOut)
async def list_memories(runner: AgentRunnerStub, query: Annotated[MemoryListQuery, Query()]) -> MemoryListOut:
    """Long-term memories, most recently changed first (at most 200), optionally searched."""
    response = await runner.ListMemories(pb.ListMemoriesRequest(query=query.q, limit=query.limit))
    return MemoryListOut(memories=[memory_out(m) for m in response.memories])


@router.post("", response_model=MemoryOut, status_code=201, responses={200: {"model": MemoryOut}})
async def create_memory(body: MemoryCreate, runner: AgentRunnerStub, response: Response) -> MemoryOut:
    """Remember a fact. An identical memory (ignoring case) is returned with 200 instead of a copy."""
    created = await runner.CreateMemory(pb.CreateMemoryRequest(content=body.content))
    if not created.created:
        response.status_code = 200
    return memory_out(created.memory)


@router.patch("/{memory_id}", response_model=MemoryOut)
async def update_memory(memory_id: MemoryId, body: MemoryPatch, runner: AgentRunnerStub) -> MemoryOut:
    """Correct a memory's content; recall uses the new text from the next turn on."""
    memory = await runner.UpdateMemory(pb.UpdateMemoryRequest(id=memory_id, content=body.content))
    return memory_out(memory)


@router.delete("/{memory_id}", status_code=204, response_class=Response)
async def delete_memory(memory_id: MemoryId, runner: AgentRunnerStub) -> Response:
    """Forget a memory for good."""
    await runner.DeleteMemory(pb.DeleteMemoryRequest(id=memory_id))
    return Response(status_code=204)
