"""DocumentsService: proto <-> `Documentation` only."""

from __future__ import annotations

import grpc

from popagent.agent_runner.v1 import documents_pb2 as pb
from popagent.agent_runner.v1 import documents_pb2_grpc
from popagent_agent_runner.docs.documents import Documentation, IndexStatus
from popagent_agent_runner.docs.store import DocumentRecord
from popagent_agent_runner.servicers.messages import message_of

DEFAULT_K = 5


def document_message(record: DocumentRecord) -> pb.Document:
    return message_of(pb.Document, record)


def status_message(status: IndexStatus) -> pb.DocumentIndexStatus:
    record = status.record
    return message_of(
        pb.DocumentIndexStatus,
        record,
        include=record.include_globs,
        exclude=record.exclude_globs,
        documents=status.documents,
        chunks=status.chunks,
    )


class DocumentsServicer(documents_pb2_grpc.DocumentsServiceServicer):
    def __init__(self, docs: Documentation) -> None:
        self.docs = docs

    async def ListDocuments(
        self, request: pb.ListDocumentsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListDocumentsResponse:
        records = await self.docs.list(request.workspace_id, request.path_prefix, request.limit, request.after_path)
        return pb.ListDocumentsResponse(documents=[document_message(record) for record in records])

    async def AddDocument(self, request: pb.AddDocumentRequest, context: grpc.aio.ServicerContext) -> pb.Document:
        record = await self.docs.add(request.workspace_id, request.path, request.title, request.content)
        return document_message(record)

    async def GetDocument(self, request: pb.GetDocumentRequest, context: grpc.aio.ServicerContext) -> pb.Document:
        return document_message(await self.docs.get(request.workspace_id, request.id))

    async def UpdateDocument(self, request: pb.UpdateDocumentRequest, context: grpc.aio.ServicerContext) -> pb.Document:
        record = await self.docs.update(
            request.workspace_id,
            request.id,
            request.path if request.HasField("path") else None,
            request.title if request.HasField("title") else None,
            request.content if request.HasField("content") else None,
        )
        return document_message(record)

    async def DeleteDocument(
        self, request: pb.DeleteDocumentRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteDocumentResponse:
        await self.docs.delete(request.workspace_id, request.id)
        return pb.DeleteDocumentResponse()

    async def StartIndexing(
        self, request: pb.StartIndexingRequest, context: grpc.aio.ServicerContext
    ) -> pb.DocumentIndexStatus:
        include = list(request.include.values) if request.HasField("include") else None
        exclude = list(request.exclude.values) if request.HasField("exclude") else None
        return status_message(await self.docs.start_indexing(request.workspace_id, include, exclude))

    async def GetIndexStatus(
        self, request: pb.GetIndexStatusRequest, context: grpc.aio.ServicerContext
    ) -> pb.DocumentIndexStatus:
        return status_message(await self.docs.status(request.workspace_id))

    async def SearchDocuments(
        self, request: pb.SearchDocumentsRequest, context: grpc.aio.ServicerContext
    ) -> pb.SearchDocumentsResponse:
        hits = await self.docs.search(request.workspace_id, request.query, request.k or DEFAULT_K, request.path_prefix)
        return pb.SearchDocumentsResponse(
            hits=[
                pb.DocumentSearchHit(
                    document_id=hit.document_id,
                    path=hit.path,
                    heading_path=hit.heading_path,
                    content=hit.content,
                    score=hit.score,
                )
                for hit in hits
            ],
            ranking="rerank" if self.docs.reranked else "fused",
        )
