"""/api/workspaces/:id/documents: a workspace's documentation (agent-runner's DocumentsService)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from starlette.convertors import StringConvertor, register_url_convertor

from popagent.agent_runner.v1 import documents_pb2 as pb
from popagent.agent_runner.v1 import documents_pb2_grpc
from popagent_gateway.deps import cached_stub
from popagent_gateway.dto.documents import (
    DocumentCreate,
    DocumentHitOut,
    DocumentListOut,
    DocumentListQuery,
    DocumentOut,
    DocumentPatch,
    DocumentSearch,
    DocumentSearchOut,
    IndexStart,
    IndexStatusOut,
)
from popagent_gateway.dto.workspaces import WORKSPACE_ID_PATTERN
from popagent_gateway.wire import from_message

router = APIRouter(prefix="/workspaces/{workspace_id}/documents", tags=["documents"])

# Adding or changing a document embeds it before answering; a slow local embedding model needs time.
EMBEDDING_TIMEOUT_S = 120.0

WorkspaceId = Annotated[str, Path(pattern=WORKSPACE_ID_PATTERN, max_length=63)]
DOCUMENT_ID_REGEX = r"doc_[0-9a-f]{32}"
DocumentId = Annotated[str, Path(pattern=f"^{DOCUMENT_ID_REGEX}$", description="as agent-runner makes them")]


class DocumentIdConvertor(StringConvertor):
    """Routes `/{document_id:document_id}` only for what a document id can be, so `/index` and
    `/search` are never also a document's path: their Allow lists only their own methods, and
    a PATCH there is 405, not a lookup of a document called "index"."""

    regex = DOCUMENT_ID_REGEX


register_url_convertor("document_id", DocumentIdConvertor())


async def get_documents(request: Request) -> documents_pb2_grpc.DocumentsServiceStub:
    return cached_stub(request, "agent-runner", documents_pb2_grpc.DocumentsServiceStub)


DocumentsStub = Annotated[documents_pb2_grpc.DocumentsServiceStub, Depends(get_documents)]


def document_out(document: pb.Document) -> DocumentOut:
    return DocumentOut(
        id=document.id,
        workspace_id=document.workspace_id,
        origin=document.origin,  # pyright: ignore[reportArgumentType] - "file" or "api", the owner's CHECK
        path=document.path,
        title=document.title,
        content_hash=document.content_hash,
        indexed=document.indexed,
        chunk_count=document.chunk_count,
        chars=document.chars,
        created_at=document.created_at,
        updated_at=document.updated_at,
        content=document.content if document.HasField("content") else None,
    )


@router.get("", response_model=DocumentListOut)
async def list_documents(
    workspace_id: WorkspaceId, docs: DocumentsStub, query: Annotated[DocumentListQuery, Query()]
) -> DocumentListOut:
    """The workspace's documents in path order (files and added documents), without content."""
    response = await docs.ListDocuments(
        pb.ListDocumentsRequest(workspace_id=workspace_id, path_prefix=query.path_prefix, limit=query.limit)
    )
    return DocumentListOut(documents=[document_out(d) for d in response.documents])


@router.post("", response_model=DocumentOut, status_code=201)
async def add_document(workspace_id: WorkspaceId, body: DocumentCreate, docs: DocumentsStub) -> DocumentOut:
    """Add a Markdown document to the workspace's documentation; it is searchable when this answers."""
    document = await docs.AddDocument(
        pb.AddDocumentRequest(workspace_id=workspace_id, path=body.path, title=body.title, content=body.content),
        timeout=EMBEDDING_TIMEOUT_S,
    )
    return document_out(document)


@router.post("/index", response_model=IndexStatusOut, status_code=202)
async def start_indexing(
    workspace_id: WorkspaceId, docs: DocumentsStub, body: IndexStart | None = None
) -> IndexStatusOut:
    """Queue an index run of the workspace's files (in the background; only changed files are re-embedded)."""
    request = pb.StartIndexingRequest(workspace_id=workspace_id)
    if body is not None and body.include is not None:
        request.include.values.extend(body.include)
    if body is not None and body.exclude is not None:
        request.exclude.SetInParent()
        request.exclude.values.extend(body.exclude)
    return from_message(IndexStatusOut, await docs.StartIndexing(request))


@router.get("/index", response_model=IndexStatusOut)
async def index_status(workspace_id: WorkspaceId, docs: DocumentsStub) -> IndexStatusOut:
    """The index's state and the progress of its last (or current) run."""
    return from_message(IndexStatusOut, await docs.GetIndexStatus(pb.GetIndexStatusRequest(workspace_id=workspace_id)))


@router.post("/search", response_model=DocumentSearchOut)
async def search_documents(workspace_id: WorkspaceId, body: DocumentSearch, docs: DocumentsStub) -> DocumentSearchOut:
    """Hybrid search of the workspace's documentation: chunks with their path, heading path and score."""
    response = await docs.SearchDocuments(
        pb.SearchDocumentsRequest(workspace_id=workspace_id, query=body.query, k=body.k, path_prefix=body.path_prefix)
    )
    return DocumentSearchOut(
        hits=[
            DocumentHitOut(
                document_id=hit.document_id,
                path=hit.path,
                heading_path=list(hit.heading_path),
                content=hit.content,
                score=hit.score,
            )
            for hit in response.hits
        ],
        ranking=response.ranking,  # pyright: ignore[reportArgumentType] - "rerank" or "fused"
    )


@router.get("/{document_id:document_id}", response_model=DocumentOut)
async def get_document(workspace_id: WorkspaceId, document_id: DocumentId, docs: DocumentsStub) -> DocumentOut:
    """One document with its content."""
    return document_out(await docs.GetDocument(pb.GetDocumentRequest(workspace_id=workspace_id, id=document_id)))


@router.patch("/{document_id:document_id}", response_model=DocumentOut)
async def update_document(
    workspace_id: WorkspaceId, document_id: DocumentId, body: DocumentPatch, docs: DocumentsStub
) -> DocumentOut:
    """Change an added document (re-embedded before answering); a workspace file's document is refused (400)."""
    document = await docs.UpdateDocument(
        pb.UpdateDocumentRequest(workspace_id=workspace_id, id=document_id, **body.changes()),
        timeout=EMBEDDING_TIMEOUT_S,
    )
    return document_out(document)


@router.delete("/{document_id:document_id}", status_code=204, response_class=Response)
async def delete_document(workspace_id: WorkspaceId, document_id: DocumentId, docs: DocumentsStub) -> Response:
    """Remove an added document; a workspace file's document is refused (400): exclude it from the index instead."""
    await docs.DeleteDocument(pb.DeleteDocumentRequest(workspace_id=workspace_id, id=document_id))
    return Response(status_code=204)
