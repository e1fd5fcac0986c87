"""An MCP tool result as the model reads it: text, images and resources kept, each bounded.

Text (and text resources, and structured content) go into one JSON summary, which the turn cuts to
its tool-result bound like any other tool's (`turn/capability.py`); each image follows it as an
image part, up to `MAX_IMAGE_BYTES` each and `MAX_IMAGES_BYTES` in all (a larger one is named in
the summary with its size instead). A result the server marks as an error is the call's failure.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import mcp_types as types
from pydantic_ai import BinaryContent, ToolFailed

# As a browser screenshot (browser-bridge's bound): what the turn's events and stored message carry.
MAX_IMAGE_BYTES = 2 * 1024 * 1024
MAX_IMAGES_BYTES = 2 * 1024 * 1024
# A text resource's text in the summary (the summary as a whole is bounded by the turn).
MAX_RESOURCE_TEXT_CHARS = 64 * 1024


def _decoded(data: str) -> bytes | None:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None


def tool_result(server: str, tool: str, result: types.CallToolResult) -> Any:
    summary: dict[str, Any] = {"server": server, "tool": tool, "content": []}
    files: list[BinaryContent] = []
    room = MAX_IMAGES_BYTES
    texts: list[str] = []
    for part in result.content:
        if isinstance(part, types.TextContent):
            summary["content"].append({"type": "text", "text": part.text})
            texts.append(part.text)
        elif isinstance(part, types.ImageContent | types.AudioContent):
            kind = "image" if isinstance(part, types.ImageContent) else "audio"
            data = _decoded(part.data)
            entry: dict[str, Any] = {"type": kind, "mimeType": part.mime_type}
            if data is None:
                entry["omitted"] = "not valid base64"
            elif kind == "image" and len(data) <= min(MAX_IMAGE_BYTES, room):
                room -= len(data)
                entry["bytes"] = len(data)
                files.append(BinaryContent(data=data, media_type=part.mime_type or "image/png"))
            else:
                entry["omitted"] = f"{len(data)} bytes of {kind}, not passed on"
            summary["content"].append(entry)
        elif isinstance(part, types.EmbeddedResource):
            resource = part.resource
            entry = {"type": "resource", "uri": str(resource.uri), "mimeType": resource.mime_type}
            if isinstance(resource, types.TextResourceContents):
                text = resource.text
                entry["text"] = text[:MAX_RESOURCE_TEXT_CHARS]
                if len(text) > MAX_RESOURCE_TEXT_CHARS:
                    entry["truncated"] = f"{len(text)} characters; only the first {MAX_RESOURCE_TEXT_CHARS} are kept"
            else:
                data = _decoded(resource.blob)
                size = len(data) if data is not None else 0
                if (
                    data is not None
                    and (resource.mime_type or "").startswith("image/")
                    and size <= min(MAX_IMAGE_BYTES, room)
                ):
                    room -= size
                    entry["bytes"] = size
                    files.append(BinaryContent(data=data, media_type=resource.mime_type or "image/png"))
                else:
                    entry["omitted"] = f"{size} bytes of binary content, not passed on"
            summary["content"].append(entry)
        elif isinstance(part, types.ResourceLink):
            summary["content"].append(
                {"type": "resource_link", "uri": str(part.uri), "name": part.name, "mimeType": part.mime_type}
            )
    if result.structured_content is not None:
        summary["structuredContent"] = result.structured_content
    if result.is_error:
        raise ToolFailed(f"mcp__{server}__{tool} answered with an error: " + ("\n".join(texts) or "no details"))
    return [summary, *files] if files else summary
