"""DocsStore: documents, chunks and index runs in PostgreSQL (pgvector + full text), typed records out."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import asyncpg

from popagent_agent_runner.docs.chunking import Chunk
from popagent_core.db import load_queries, record_of, wrap_db_errors
from popagent_core.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound

QUERIES = load_queries(Path(__file__).parent / "queries.sql")
DEFAULT_INCLUDE = ("**/*.md",)
TEXT_RANKED = 2000
"""Chunks with all of a query's words, and chunks with some, that full-text search ranks at most (`text_candidates`)."""
HEADING_SEPARATOR = "\x1f"
"""Joins a heading path into one array element for `insert_chunks` (a heading never holds it)."""
INDEXED_DIMS = frozenset({256, 384, 512, 768, 1024, 1536})
"""Dimensions with an HNSW index (migration 0110); other dimensions are searched by exact scan."""


@dataclass(frozen=True, slots=True)
class IndexRecord:
    workspace_id: str
    include_globs: tuple[str, ...]
    exclude_globs: tuple[str, ...]
    state: str
    embedding_model: str
    files_seen: int
    files_to_embed: int
    files_embedded: int
    files_removed: int
    chunks_embedded: int
    error: str
    requested_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None

    @classmethod
    def never_indexed(cls, workspace_id: str) -> IndexRecord:
        return cls(workspace_id, DEFAULT_INCLUDE, (), "idle", "", 0, 0, 0, 0, 0, "", None, None, None)

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> IndexRecord:
        return record_of(cls, row, include_globs=tuple(row["include_globs"]), exclude_globs=tuple(row["exclude_globs"]))


@dataclass(frozen=True, slots=True)
class DocumentRecord:
    id: str
    workspace_id: str
    origin: str
    path: str
    title: str
    content_hash: str
    indexed: bool
    """Its chunks were made from its current content with the current embedding model."""
    chunk_count: int
    chars: int
    created_at: datetime
    updated_at: datetime
    content: str | None = None


@dataclass(frozen=True, slots=True)
class FileState:
    id: str
    path: str
    content_hash: str
    embedded_hash: str
    embedded_model: str


@dataclass(frozen=True, slots=True)
class Candidate:
    chunk_id: int
    document_id: str
    path: str
    heading_path: tuple[str, ...]
    content: str
    score: float


@dataclass(frozen=True, slots=True)
class EmbeddedDocument:
    """A document's content with its chunks and their vectors, ready to store in one transaction."""

    path: str
    title: str
    content: str
    content_hash: str
    chunks: Sequence[Chunk]
    vectors: Sequence[Sequence[float]]


def vector_text(vector: Sequence[float]) -> str:
    """pgvector's text form, which asyncpg sends as text (the extension has no binary codec here)."""
    return "[" + ",".join(f"{value:.7g}" for value in vector) + "]"


def like_prefix(prefix: str) -> str:
    """A LIKE pattern matching paths that start with `prefix` literally ('' matches everything)."""
    if not prefix:
        return ""
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "%"


class DocsStore:
    def __init__(self, pool: asyncpg.Pool, queries: dict[str, str] = QUERIES) -> None:
        self.pool = pool
        self.q = queries

    # -- index runs ----------------------------------------------------------------------------------------------

    async def index(self, workspace_id: str) -> IndexRecord:
        with wrap_db_errors():
            row = await self.pool.fetchrow(self.q["get_index"], workspace_id)
        return IndexRecord.never_indexed(workspace_id) if row is None else IndexRecord.from_row(row)

    async def request_index(
        self, workspace_id: str, include: Sequence[str] | None, exclude: Sequence[str] | None
    ) -> IndexRecord:
        with wrap_db_errors():
            row = await self.pool.fetchrow(
                self.q["request_index"],
                workspace_id,
                None if include is None else list(include),
                None if exclude is None else list(exclude),
                list(DEFAULT_INCLUDE),
            )
        assert row is not None
        return IndexRecord.from_row(row)

    async def pending(self) -> list[str]:
        with wrap_db_errors():
            return [row["workspace_id"] for row in await self.pool.fetch(self.q["pending_indexes"])]

    @contextlib.asynccontextmanager
    async def run_lock(self, workspace_id: str) -> AsyncIterator[bool]:
        """Whether this process may run the workspace's index now (one runner per workspace across workers).

        A session advisory lock on a connection held for the run: a worker that dies releases it.
        """
        with wrap_db_errors():
            conn = await self.pool.acquire()
        try:
            with wrap_db_errors():
                got = bool(await conn.fetchval(self.q["try_lock_workspace"], workspace_id))
            try:
                yield got
            finally:
                if got:
                    with wrap_db_errors(), contextlib.suppress(asyncpg.InterfaceError):
                        await conn.fetchval(self.q["unlock_workspace"], workspace_id)
        finally:
            await self.pool.release(conn)

    async def start_run(self, workspace_id: str, model: str) -> tuple[tuple[str, ...], tuple[str, ...], datetime]:
        with wrap_db_errors():
            row = await self.pool.fetchrow(self.q["start_run"], workspace_id, model)
        if row is None:
            raise NotFound(f"workspace {workspace_id!r} has no documentation index")
        return tuple(row["include_globs"]), tuple(row["exclude_globs"]), row["requested_at"]

    async def run_planned(self, workspace_id: str, seen: int, to_embed: int, removed: int) -> None:
        with wrap_db_errors():
            await self.pool.execute(self.q["run_planned"], workspace_id, seen, to_embed, removed)

    async def finish_run(self, workspace_id: str, requested_at: datetime) -> str:
        with wrap_db_errors():
            return str(await self.pool.fetchval(self.q["finish_run"], workspace_id, requested_at))

    async def fail_run(self, workspace_id: str, error: str) -> None:
        with wrap_db_errors():
            await self.pool.execute(self.q["fail_run"], workspace_id, error[:2000])

    # -- documents -----------------------------------------------------------------------------------------------

    async def file_states(self, workspace_id: str) -> dict[str, FileState]:
        with wrap_db_errors():
            rows = await self.pool.fetch(self.q["file_states"], workspace_id)
        return {
            row["path"]: FileState(
                row["id"], row["path"], row["content_hash"], row["embedded_hash"], row["embedded_model"]
            )
            for row in rows
        }

    async def remove(self, workspace_id: str, document_ids: Sequence[str]) -> None:
        if document_ids:
            with wrap_db_errors():
                await self.pool.execute(self.q["delete_documents"], workspace_id, list(document_ids))

    async def store_files(self, workspace_id: str, model: str, documents: Sequence[EmbeddedDocument]) -> int:
        """Write file documents with their new chunks and the run's progress in one transaction; the chunks written.

        One commit per embedding batch, not per file: a commit waits for the disk, and a run
        stopped between batches only re-embeds the batch it was in.
        """
        written = 0
        files = 0
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                for document in documents:
                    document_id = await conn.fetchval(
                        self.q["upsert_file_document"],
                        _new_id(),
                        workspace_id,
                        document.path,
                        document.title,
                        document.content,
                        document.content_hash,
                    )
                    if document_id is None:
                        continue  # an API document holds this path: it stays as it is
                    await self._replace_chunks(conn, document_id, workspace_id, model, document)
                    written += len(document.chunks)
                    files += 1
                await conn.execute(self.q["run_progress"], workspace_id, files, written)
        return written

    async def _replace_chunks(
        self,
        conn: asyncpg.Connection | asyncpg.pool.PoolConnectionProxy,
        document_id: str,
        workspace_id: str,
        model: str,
        document: EmbeddedDocument,
    ) -> None:
        await conn.execute(self.q["delete_chunks"], document_id)
        if document.chunks:
            dims = {len(vector) for vector in document.vectors}
            if len(dims) != 1:
                raise InvalidArgument("the embedding model answered vectors of different lengths")
            await conn.execute(
                self.q["insert_chunks"],
                document_id,
                workspace_id,
                document.path,
                model,
                dims.pop(),
                [chunk.ordinal for chunk in document.chunks],
                [HEADING_SEPARATOR.join(chunk.heading_path) for chunk in document.chunks],
                [chunk.content for chunk in document.chunks],
                [vector_text(vector) for vector in document.vectors],
            )
        await conn.execute(self.q["mark_embedded"], document_id, model, len(document.chunks))

    async def add_api_document(self, workspace_id: str, model: str, document: EmbeddedDocument) -> DocumentRecord:
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                document_id = await conn.fetchval(
                    self.q["insert_api_document"],
                    _new_id(),
                    workspace_id,
                    document.path,
                    document.title,
                    document.content,
                    document.content_hash,
                )
                if document_id is None:
                    raise AlreadyExists(f"workspace {workspace_id!r} already has a document at {document.path!r}")
                await self._replace_chunks(conn, document_id, workspace_id, model, document)
        return await self.get(workspace_id, document_id, model)

    async def update_api_document(
        self, workspace_id: str, document_id: str, model: str, document: EmbeddedDocument
    ) -> DocumentRecord:
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                try:
                    updated = await conn.fetchval(
                        self.q["update_api_document"],
                        workspace_id,
                        document_id,
                        document.path,
                        document.title,
                        document.content,
                        document.content_hash,
                    )
                except asyncpg.UniqueViolationError:
                    raise AlreadyExists(
                        f"workspace {workspace_id!r} already has a document at {document.path!r}"
                    ) from None
                if updated is None:
                    await self._refuse_file_document(conn, workspace_id, document_id, "edited")
                await self._replace_chunks(conn, document_id, workspace_id, model, document)
        return await self.get(workspace_id, document_id, model)

    async def delete_api_document(self, workspace_id: str, document_id: str) -> None:
        with wrap_db_errors():
            async with self.pool.acquire() as conn:
                if await conn.fetchval(self.q["delete_api_document"], workspace_id, document_id) is None:
                    await self._refuse_file_document(conn, workspace_id, document_id, "deleted")

    async def _refuse_file_document(
        self,
        conn: asyncpg.Connection | asyncpg.pool.PoolConnectionProxy,
        workspace_id: str,
        document_id: str,
        what: str,
    ) -> None:
        row = await conn.fetchrow(self.q["get_document"], workspace_id, document_id)
        if row is None:
            raise NotFound(f"document {document_id!r} not found in workspace {workspace_id!r}")
        raise FailedPrecondition(
            f"document {document_id!r} is the workspace file {row['path']!r}: it is {what} in the workspace "
            "(or left out with the index's exclude globs), not through the documents API"
        )

    async def list(
        self, workspace_id: str, model: str, path_prefix: str = "", limit: int = 1000, after_path: str = ""
    ) -> list[DocumentRecord]:
        with wrap_db_errors():
            rows = await self.pool.fetch(
                self.q["list_documents"], workspace_id, like_prefix(path_prefix), limit, after_path
            )
        return [_document(row, model) for row in rows]

    async def counts(self, workspace_id: str) -> tuple[int, int]:
        with wrap_db_errors():
            row = await self.pool.fetchrow(self.q["count_documents"], workspace_id)
        assert row is not None
        return int(row["documents"]), int(row["chunks"])

    async def get(self, workspace_id: str, document_id: str, model: str) -> DocumentRecord:
        with wrap_db_errors():
            row = await self.pool.fetchrow(self.q["get_document"], workspace_id, document_id)
        if row is None:
            raise NotFound(f"document {document_id!r} not found in workspace {workspace_id!r}")
        return _document(row, model, with_content=True)

    # -- retrieval -----------------------------------------------------------------------------------------------

    async def vector_candidates(
        self, workspace_id: str, model: str, vector: Sequence[float], path_prefix: str, limit: int, ef_search: int
    ) -> list[Candidate]:
        dims = len(vector)
        args = (workspace_id, model, vector_text(vector), like_prefix(path_prefix), limit)
        with wrap_db_errors():
            async with self.pool.acquire() as conn:
                rows: list[asyncpg.Record] = []
                if dims in INDEXED_DIMS:
                    async with conn.transaction():
                        await conn.fetchval(self.q["set_ef_search"], str(int(ef_search)))
                        rows = await conn.fetch(self.q["vector_candidates"].replace("{dims}", str(dims)), *args)
                if len(rows) < limit:
                    exact = await conn.fetch(self.q["vector_candidates_exact"].replace("{dims}", str(dims)), *args)
                    if len(exact) > len(rows):
                        rows = exact
        return [_candidate(row, 1.0 - float(row["distance"])) for row in rows]

    async def text_candidates(
        self, workspace_id: str, model: str, query: str, path_prefix: str, limit: int
    ) -> list[Candidate]:
        with wrap_db_errors():
            rows = await self.pool.fetch(
                self.q["text_candidates"], workspace_id, model, query, like_prefix(path_prefix), limit, TEXT_RANKED
            )
        return [_candidate(row, float(row["rank"])) for row in rows]


def _new_id() -> str:
    return "doc_" + uuid.uuid4().hex


def _candidate(row: asyncpg.Record, score: float) -> Candidate:
    return Candidate(row["id"], row["document_id"], row["path"], tuple(row["heading_path"]), row["content"], score)


def _document(row: asyncpg.Record, model: str, *, with_content: bool = False) -> DocumentRecord:
    return record_of(
        DocumentRecord,
        row,
        indexed=bool(model) and row["embedded_hash"] == row["content_hash"] and row["embedded_model"] == model,
        content=row["content"] if with_content else None,
    )
