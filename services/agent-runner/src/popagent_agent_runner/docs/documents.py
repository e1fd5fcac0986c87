"""`Documentation`: what the gRPC service and the `searchDocs` tool use, one per process.

It holds the store, the background indexer and the search, all reaching the model gateway
through one `GatewayRetrieval`, and checks what callers give before any of them sees it.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import httpx

from popagent_agent_runner.docs.indexer import DocsIndexer, embed_documents
from popagent_agent_runner.docs.search import DocsSearch, SearchHit
from popagent_agent_runner.docs.store import DocsStore, DocumentRecord, EmbeddedDocument, IndexRecord
from popagent_agent_runner.llm.embeddings import GatewayRetrieval
from popagent_agent_runner.state.workspaces import AgentWorkspaceStore, normalize_relative_path
from popagent_core.errors import FailedPrecondition, InvalidArgument, NotFound

MAX_API_DOCUMENT_CHARS = 1_000_000
MAX_TITLE_CHARS = 500
EMBEDDINGS_TIMEOUT = httpx.Timeout(120.0, connect=5.0)
_DOCUMENT_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def _check_text(value: str, what: str) -> None:
    if "\x00" in value:
        raise InvalidArgument(f"{what} must not contain NUL characters")


def _check_id(workspace_id: str, document_id: str) -> None:
    if not _DOCUMENT_ID.match(document_id):
        raise NotFound(f"document {document_id[:80]!r} not found in workspace {workspace_id!r}")


@dataclass(frozen=True, slots=True)
class IndexStatus:
    record: IndexRecord
    documents: int
    chunks: int


@dataclass(kw_only=True, eq=False)
class Documentation:
    store: DocsStore
    indexer: DocsIndexer
    search_engine: DocsSearch
    workspaces: AgentWorkspaceStore

    @property
    def model(self) -> str:
        return self.indexer.embedding_model

    @property
    def reranked(self) -> bool:
        return bool(self.search_engine.rerank_model)

    async def list(
        self, workspace_id: str, path_prefix: str = "", limit: int = 0, after_path: str = ""
    ) -> list[DocumentRecord]:
        await self.workspaces.get(workspace_id)
        _check_text(path_prefix, "pathPrefix")
        _check_text(after_path, "afterPath")
        if not 0 <= limit <= 1000:
            raise InvalidArgument("limit must be between 1 and 1000")
        return await self.store.list(workspace_id, self.model, path_prefix, limit or 1000, after_path)

    async def get(self, workspace_id: str, document_id: str) -> DocumentRecord:
        _check_id(workspace_id, document_id)
        return await self.store.get(workspace_id, document_id, self.model)

    async def add(self, workspace_id: str, path: str, title: str, content: str) -> DocumentRecord:
        model = self.indexer.require_model()
        await self.workspaces.get(workspace_id)
        document = await self._embedded(path, title, content)
        return await self.store.add_api_document(workspace_id, model, document)

    async def update(
        self, workspace_id: str, document_id: str, path: str | None, title: str | None, content: str | None
    ) -> DocumentRecord:
        model = self.indexer.require_model()
        _check_id(workspace_id, document_id)
        current = await self.store.get(workspace_id, document_id, model)
        if current.origin != "api":
            # The store refuses it too; refused here before paying for embeddings.
            raise FailedPrecondition(
                f"document {document_id!r} is the workspace file {current.path!r}: it is edited in the workspace, "
                "not through the documents API"
            )
        document = await self._embedded(
            current.path if path is None else path,
            current.title if title is None else title,
            (current.content or "") if content is None else content,
        )
        return await self.store.update_api_document(workspace_id, document_id, model, document)

    async def delete(self, workspace_id: str, document_id: str) -> None:
        _check_id(workspace_id, document_id)
        await self.store.delete_api_document(workspace_id, document_id)

    async def start_indexing(
        self, workspace_id: str, include: Sequence[str] | None, exclude: Sequence[str] | None
    ) -> IndexStatus:
        await self.indexer.request(workspace_id, include, exclude)
        return await self.status(workspace_id)

    async def status(self, workspace_id: str) -> IndexStatus:
        await self.workspaces.get(workspace_id)
        record = await self.store.index(workspace_id)
        documents, chunks = await self.store.counts(workspace_id)
        return IndexStatus(record, documents, chunks)

    async def search(self, workspace_id: str, query: str, k: int = 5, path_prefix: str = "") -> list[SearchHit]:
        await self.workspaces.get(workspace_id)
        _check_text(query, "query")
        _check_text(path_prefix, "pathPrefix")
        return await self.search_engine.search(workspace_id, query, k, path_prefix)

    async def _embedded(self, path: str, title: str, content: str) -> EmbeddedDocument:
        relative = str(normalize_relative_path(path))
        if len(title) > MAX_TITLE_CHARS or "\x00" in title:
            raise InvalidArgument(f"title must be at most {MAX_TITLE_CHARS} characters")
        if not content.strip() or len(content) > MAX_API_DOCUMENT_CHARS or "\x00" in content:
            raise InvalidArgument(f"content must be 1 to {MAX_API_DOCUMENT_CHARS} characters of text")
        digest = hashlib.sha256(content.encode()).hexdigest()
        title = title or relative.rsplit("/", 1)[-1]
        [document] = await embed_documents(self.indexer.retrieval, self.model, [(relative, title, content, digest)])
        return document


@contextlib.asynccontextmanager
async def documentation(
    pool: asyncpg.Pool,
    workspaces: AgentWorkspaceStore,
    workspace_root: Path,
    *,
    gateway_url: str,
    gateway_api_key: str,
    embedding_model: str,
    rerank_model: str,
) -> AsyncIterator[Documentation]:
    """The process's documentation service; leaving stops its index runs (resumed by the next start)."""
    async with (
        httpx.AsyncClient(timeout=EMBEDDINGS_TIMEOUT) as http,
        GatewayRetrieval(gateway_url, gateway_api_key or None, http_client=http) as retrieval,
    ):
        store = DocsStore(pool)
        indexer = DocsIndexer(
            store=store,
            workspaces=workspaces,
            workspace_root=workspace_root,
            retrieval=retrieval,
            embedding_model=embedding_model,
        )
        docs = Documentation(
            store=store,
            indexer=indexer,
            search_engine=DocsSearch(
                store=store, retrieval=retrieval, embedding_model=embedding_model, rerank_model=rerank_model
            ),
            workspaces=workspaces,
        )
        try:
            yield docs
        finally:
            await indexer.close()
