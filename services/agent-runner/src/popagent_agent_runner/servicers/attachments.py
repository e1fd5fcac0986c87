"""AttachmentsService: the session's attachments; proto <-> AttachmentStore."""

from __future__ import annotations

import grpc

from popagent.agent_runner.v1 import attachments_pb2 as pb
from popagent.agent_runner.v1 import attachments_pb2_grpc
from popagent_agent_runner.attachments.store import AttachmentStore
from popagent_agent_runner.servicers.messages import message_of


class AttachmentsServicer(attachments_pb2_grpc.AttachmentsServiceServicer):
    def __init__(self, store: AttachmentStore) -> None:
        self.store = store

    async def AddAttachment(self, request: pb.AddAttachmentRequest, context: grpc.aio.ServicerContext) -> pb.Attachment:
        added = await self.store.add(request.session_id, request.filename, request.content)
        return message_of(pb.Attachment, added)

    async def ListAttachments(
        self, request: pb.ListAttachmentsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListAttachmentsResponse:
        listed = await self.store.list(request.session_id)
        return pb.ListAttachmentsResponse(attachments=[message_of(pb.Attachment, record) for record in listed])

    async def GetAttachment(
        self, request: pb.GetAttachmentRequest, context: grpc.aio.ServicerContext
    ) -> pb.AttachmentContent:
        loaded = await self.store.get(request.session_id, request.attachment_id)
        return pb.AttachmentContent(attachment=message_of(pb.Attachment, loaded.record), content=loaded.content)

    async def CopyAttachmentToWorkspace(
        self, request: pb.CopyAttachmentToWorkspaceRequest, context: grpc.aio.ServicerContext
    ) -> pb.CopiedAttachment:
        copied = await self.store.copy_to_workspace(request.session_id, request.attachment_id, request.path)
        return message_of(pb.CopiedAttachment, copied)
