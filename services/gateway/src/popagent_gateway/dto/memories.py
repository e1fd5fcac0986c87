"""Long-term memories: one fact or preference each, kept across sessions."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from popagent_gateway.dto import PatchModel, WireInput, WireModel

MAX_CONTENT_CHARS = 2000
LIST_LIMIT = 200

Content = Annotated[str, Field(min_length=1, max_length=MAX_CONTENT_CHARS, description="one fact or preference")]
Kind = Literal["fact", "preference"]
KIND_DESCRIPTION = "fact (about the user or the world) or preference (how the user wants things)"
PINNED_DESCRIPTION = "a pinned memory is never changed by the agent and never ages out (retention)"


class MemoryOut(WireModel):
    id: str
    content: str
    source: str = Field(description="user (this API) or agent (the remember tool)")
    session_id: str | None = Field(description="the session that wrote it, if any (provenance only)")
    created_at: str
    updated_at: str
    kind: Kind = Field(description=KIND_DESCRIPTION)
    pinned: bool = Field(description=PINNED_DESCRIPTION)


class MemoryListOut(WireModel):
    memories: list[MemoryOut]


class MemoryListQuery(BaseModel):
    """Query of GET /api/memories; unknown parameters are refused."""

    model_config = ConfigDict(extra="forbid")

    q: str = Field(default="", max_length=500, description="full-text search (web-search syntax)")
    limit: int = Field(default=LIST_LIMIT, ge=1, le=LIST_LIMIT)


class MemoryCreate(WireInput):
    content: Content
    kind: Kind = Field(default="fact", description=KIND_DESCRIPTION)
    pinned: bool = Field(default=False, description=PINNED_DESCRIPTION)


class MemoryPatch(PatchModel):
    """Any of content, kind and pin; the fields not sent stay."""

    content: Content | None = None
    kind: Kind | None = Field(default=None, description=KIND_DESCRIPTION)
    pinned: bool | None = Field(default=None, description=PINNED_DESCRIPTION)
