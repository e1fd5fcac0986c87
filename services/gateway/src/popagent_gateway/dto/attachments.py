"""/api/sessions/:id/attachments: files attached to a chat's messages."""

from __future__ import annotations

import re

from pydantic import Field

from popagent_gateway.dto import WireInput, WireModel

# agent-runner's bound of one file (attachments/store.py); the upload route's body may be this large.
MAX_ATTACHMENT_BYTES = 4 * 1024 * 1024
# Every type agent-runner's sniffing gives a stored file (attachments/sniff.py), which a download is served as.
ATTACHMENT_MEDIA_TYPES = (
    "image/png",
    "image/jpeg",
    "image/gif",
    "image/webp",
    "application/pdf",
    "text/plain",
    "text/csv",
    "text/markdown",
    "application/json",
)
ATTACHMENT_UPLOAD_PATH = re.compile(r"/api/sessions/[^/]+/attachments")


class AttachmentOut(WireModel):
    id: str
    session_id: str
    filename: str
    media_type: str = Field(description="sniffed from the file's bytes, never the uploader's claim")
    size: int
    created_at: str
    url: str = Field(description="the download route: what a message's file part carries as its url")


class AttachmentListOut(WireModel):
    attachments: list[AttachmentOut]


class AttachmentCopy(WireInput):
    path: str | None = Field(
        default=None,
        min_length=1,
        max_length=1024,
        description="the new file's workspace-relative path; absent: the attachment's file name at the root",
    )


class AttachmentCopyOut(WireModel):
    workspace_id: str
    path: str
    size: int
