"""How an attachment reaches the model: images as image parts, text as its text (bounded and
delimited with its name), anything else named but not inlined."""

from __future__ import annotations

import re

from pydantic_ai.messages import BinaryContent, UserContent

from popagent_agent_runner.attachments.sniff import is_image, is_text
from popagent_agent_runner.attachments.store import MAX_PER_MESSAGE, AttachmentStore, LoadedAttachment
from popagent_core.errors import InvalidArgument

# A text attachment is inlined up to this many characters (about 25k tokens); the rest is cut, and said so.
MAX_TEXT_CHARS = 100_000
# The url a stored attachment's file part carries: the gateway's download route.
ATTACHMENT_URL = re.compile(r"^/api/sessions/(?P<session>[^/]{1,128})/attachments/(?P<id>att-[0-9a-f]{32})$")


def _label(filename: str) -> str:
    # The name is the uploader's: quotes and angle brackets could fake the delimiters.
    return re.sub(r'["<>\n\r]', "_", filename)


def model_parts(loaded: LoadedAttachment) -> list[UserContent]:
    record = loaded.record
    name = _label(record.filename)
    if is_image(record.media_type):
        return [f'[attached image "{name}"]', BinaryContent(data=loaded.content, media_type=record.media_type)]
    if is_text(record.media_type):
        text = loaded.content.decode("utf-8", errors="replace")
        cut = ""
        if len(text) > MAX_TEXT_CHARS:
            text, cut = text[:MAX_TEXT_CHARS], f"\n[cut: the file has {len(text)} characters, {MAX_TEXT_CHARS} shown]"
        return [f'<attachment name="{name}" type="{record.media_type}">\n{text}{cut}\n</attachment>']
    return [
        f'[attached file "{name}" ({record.media_type}, {record.size} bytes): not readable here; '
        "the user can copy it into the workspace]"
    ]


def attachment_refs(parts: list[dict[str, object]]) -> list[tuple[str, str]]:
    """The (session, attachment id) of each file part that names a stored attachment."""
    refs: list[tuple[str, str]] = []
    for part in parts:
        url = part.get("url")
        if part.get("type") == "file" and isinstance(url, str) and (match := ATTACHMENT_URL.match(url)):
            refs.append((match["session"], match["id"]))
    return refs


async def load_attachments(
    store: AttachmentStore, session_id: str, parts: list[dict[str, object]]
) -> dict[str, LoadedAttachment]:
    """The stored attachments a message's file parts name, by url: each must be of this session."""
    files = sum(1 for part in parts if part.get("type") == "file")
    if files > MAX_PER_MESSAGE:
        raise InvalidArgument(f"a message may carry at most {MAX_PER_MESSAGE} attachments, not {files}")
    loaded: dict[str, LoadedAttachment] = {}
    for session, attachment_id in attachment_refs(parts):
        if session != session_id:
            raise InvalidArgument(f"attachment {attachment_id!r} belongs to another session")
        loaded[f"/api/sessions/{session}/attachments/{attachment_id}"] = await store.get(session, attachment_id)
    return loaded
