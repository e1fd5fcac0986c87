"""A workspace's documentation: its documents, its index run and search."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel
from pydantic.json_schema import SkipJsonSchema

from popagent_gateway.dto import (
    NOT_BLANK_SCHEMA,
    RELATIVE_PATH_DESCRIPTION,
    RELATIVE_PATH_PATTERN,
    PatchModel,
    WireInput,
    WireModel,
)

DocumentPath = Annotated[
    str, Field(min_length=1, max_length=1024, pattern=RELATIVE_PATH_PATTERN, description=RELATIVE_PATH_DESCRIPTION)
]
Title = Annotated[str, Field(max_length=500)]
# Not only whitespace: agent-runner refuses that (400).
Content = Annotated[str, Field(min_length=1, max_length=1_000_000, json_schema_extra=NOT_BLANK_SCHEMA)]
# agent-runner's rule (`check_globs`): relative (no leading '/'), no '..' component.
_GLOB_SEGMENT = r"(?:[^./][^/]*|\.|\.[^./][^/]*|\.\.[^/]+)"
GLOB_PATTERN = rf"^{_GLOB_SEGMENT}(?:/(?:{_GLOB_SEGMENT})?)*$"
Glob = Annotated[str, Field(min_length=1, max_length=200, pattern=GLOB_PATTERN, description="relative, no '..'")]


class DocumentOut(WireModel):
    id: str
    workspace_id: str
    origin: Literal["file", "api"] = Field(description="a workspace file (kept by indexing) or added through the API")
    path: str
    title: str
    content_hash: str = Field(description="sha256 of the content")
    indexed: bool = Field(description="its chunks were made from this content with the current embedding model")
    chunk_count: int
    chars: int
    created_at: str
    updated_at: str
    content: str | None = Field(default=None, description="in the answers about one document only")


class DocumentListOut(WireModel):
    documents: list[DocumentOut]


class DocumentListQuery(BaseModel):
    """Query of GET /api/workspaces/:id/documents; unknown parameters are refused."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, validate_by_name=True)

    path_prefix: str = Field(default="", max_length=1024, description="only paths starting with this")
    limit: int = Field(default=1000, ge=1, le=1000)


class DocumentCreate(WireInput):
    path: DocumentPath
    title: Title = Field(default="", description="omit to use the file name of the path")
    content: Content = Field(description="Markdown")


class DocumentPatch(PatchModel):
    path: DocumentPath | SkipJsonSchema[None] = None
    title: Title | SkipJsonSchema[None] = None
    content: Content | SkipJsonSchema[None] = None


class IndexStart(WireInput):
    include: Annotated[list[Glob], Field(min_length=1, max_length=32)] | SkipJsonSchema[None] = Field(
        default=None, description="path globs to index (the first run's default: **/*.md); omit to keep them"
    )
    exclude: Annotated[list[Glob], Field(max_length=32)] | SkipJsonSchema[None] = Field(
        default=None, description="path globs left out; omit to keep them"
    )


class IndexStatusOut(WireModel):
    workspace_id: str
    state: Literal["idle", "queued", "running", "failed"]
    include: list[str]
    exclude: list[str]
    embedding_model: str
    files_seen: int = Field(description="files the globs matched in the last (or current) run")
    files_to_embed: int = Field(description="new or changed files the run embeds")
    files_embedded: int
    files_removed: int = Field(description="documents of vanished files removed")
    chunks_embedded: int
    error: str
    requested_at: str
    started_at: str
    finished_at: str
    documents: int = Field(description="documents the index holds now")
    chunks: int


class DocumentSearch(WireInput):
    query: Annotated[str, Field(min_length=1, max_length=2000)]
    k: Annotated[int, Field(ge=1, le=50)] = 5
    path_prefix: Annotated[str, Field(max_length=1024)] = Field(
        default="", description="only documents whose path starts with this"
    )


class DocumentHitOut(WireModel):
    document_id: str
    path: str
    heading_path: list[str]
    content: str
    score: float


class DocumentSearchOut(WireModel):
    hits: list[DocumentHitOut]
    ranking: Literal["rerank", "fused"] = Field(description="who ordered the hits: the rerank model or the fusion")
