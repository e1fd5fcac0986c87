"""Long-term memories: one fact or preference each, kept across sessions."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from popagent_gateway.dto import WireInput, WireModel

MAX_CONTENT_CHARS = 2000
LIST_LIMIT = 200

Content = Annotated[str, Field(min_length=1, max_length=MAX_CONTENT_CHARS, description="one fact or preference")]


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
