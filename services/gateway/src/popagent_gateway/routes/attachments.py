"""/api/sessions/:id/attachments: upload a file to attach to a chat message, list, download, copy into
the workspace. Stored by agent-runner with the session (docs/attachments.md)."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Path, Query, Request, Response

from popagent.agent_runner.v1 import attachments_pb2 as pb
from popagent_core.errors import InvalidArgument
from popagent_gateway.deps import AgentRunnerAttachmentsStub
from popagent_gateway.dto import ErrorOut
from popagent_gateway.dto.attachments import (
    ATTACHMENT_MEDIA_TYPES,
    MAX_ATTACHMENT_BYTES,
    AttachmentCopy,
    AttachmentCopyOut,
    AttachmentListOut,
    AttachmentOut,
)

router = APIRouter(prefix="/sessions", tags=["attachments"])

SessionId = Annotated[str, Path(min_length=1, max_length=128)]
AttachmentId = Annotated[str, Path(pattern=r"^att-[0-9a-f]{32}$")]


def attachment_out(message: pb.Attachment) -> AttachmentOut:
    return AttachmentOut(
        id=message.id,
        session_id=message.session_id,
        filename=message.filename,
        media_type=message.media_type,
        size=message.size,
        created_at=message.created_at,
        url=f"/api/sessions/{quote(message.session_id, safe='')}/attachments/{message.id}",
    )


@router.post(
    "/{session_id}/attachments",
    status_code=201,
    response_model=AttachmentOut,
    openapi_extra={
        "requestBody": {
            "required": True,
            "description": f"the file's bytes (at most {MAX_ATTACHMENT_BYTES}); its type is sniffed from them",
            "content": {"application/octet-stream": {"schema": {"type": "string", "minLength": 1}}},
        }
    },
    responses={404: {"model": ErrorOut, "description": "Unknown session"}},
)
async def upload_attachment(
    session_id: SessionId,
    request: Request,
    stub: AgentRunnerAttachmentsStub,
    filename: Annotated[str, Query(min_length=1, max_length=255, description="the file's name")],
) -> AttachmentOut:
    """Store one file with the session, for a message's file part to name by its `url`. Kept: PNG,
    JPEG, GIF and WebP images, PDF, and UTF-8 text; anything else is refused (400)."""
    content = await request.body()
    if not content:
        raise InvalidArgument("the request body must be the file's bytes")
    added = await stub.AddAttachment(pb.AddAttachmentRequest(session_id=session_id, filename=filename, content=content))
    return attachment_out(added)


@router.get(
    "/{session_id}/attachments",
    response_model=AttachmentListOut,
    responses={404: {"model": ErrorOut, "description": "Unknown session"}},
)
async def list_attachments(session_id: SessionId, stub: AgentRunnerAttachmentsStub) -> AttachmentListOut:
    """The session's attachments, oldest first."""
    listed = await stub.ListAttachments(pb.ListAttachmentsRequest(session_id=session_id))
    return AttachmentListOut(attachments=[attachment_out(message) for message in listed.attachments])


@router.get(
    "/{session_id}/attachments/{attachment_id}",
    response_class=Response,
    responses={
        200: {
            "description": "The file, always as a download, as the type its bytes were sniffed as",
            "content": {media_type: {} for media_type in ATTACHMENT_MEDIA_TYPES},
        },
        404: {"model": ErrorOut, "description": "Unknown session or attachment"},
    },
)
async def download_attachment(
    session_id: SessionId, attachment_id: AttachmentId, stub: AgentRunnerAttachmentsStub
) -> Response:
    """The file as uploaded: served as a download (never rendered inline), its sniffed type, no sniffing by the browser."""
    got = await stub.GetAttachment(pb.GetAttachmentRequest(session_id=session_id, attachment_id=attachment_id))
    name = got.attachment.filename
    fallback = "".join(ch if (ch.isascii() and ch.isalnum()) or ch in "._-" else "_" for ch in name) or "attachment"
    return Response(
        content=got.content,
        media_type=got.attachment.media_type,
        headers={
            "content-disposition": f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(name, safe='')}",
            "x-content-type-options": "nosniff",
            "cache-control": "private, no-store",
        },
    )


@router.post(
    "/{session_id}/attachments/{attachment_id}/copy-to-workspace",
    response_model=AttachmentCopyOut,
    responses={
        404: {"model": ErrorOut, "description": "Unknown session or attachment"},
        409: {
            "model": ErrorOut,
            "description": "The chat's agent has no write access to its workspace, or the path exists or is refused",
        },
    },
)
async def copy_attachment_to_workspace(
    session_id: SessionId, attachment_id: AttachmentId, body: AttachmentCopy, stub: AgentRunnerAttachmentsStub
) -> AttachmentCopyOut:
    """Write the attachment as a new file into the session's workspace (never over an existing file)."""
    copied = await stub.CopyAttachmentToWorkspace(
        pb.CopyAttachmentToWorkspaceRequest(session_id=session_id, attachment_id=attachment_id, path=body.path or "")
    )
    return AttachmentCopyOut(workspace_id=copied.workspace_id, path=copied.path, size=copied.size)
