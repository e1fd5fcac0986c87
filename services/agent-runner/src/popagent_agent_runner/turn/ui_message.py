"""The newest user message as the UI sends it (AI SDK UI message JSON), and the prompt the model gets from it."""

from __future__ import annotations

from typing import Any

import orjson
from pydantic_ai.messages import BinaryContent, DocumentUrl, ImageUrl, UserContent

from popagent_core.errors import InvalidArgument


def parse_user_message(message_json: str) -> dict[str, Any]:
    """The newest UI message, checked to be a user message with at least one part."""
    try:
        message = orjson.loads(message_json)
    except orjson.JSONDecodeError:
        raise InvalidArgument("message must be a JSON UI message") from None
    if not isinstance(message, dict) or message.get("role") != "user":
        raise InvalidArgument("message must be a user UI message")
    if not isinstance(message.get("id"), str) or not 1 <= len(message["id"]) <= 128:
        raise InvalidArgument("message id must be 1 to 128 characters")
    parts = message.get("parts")
    if not isinstance(parts, list) or not parts or not all(isinstance(p, dict) for p in parts):
        raise InvalidArgument("message must have parts")
    return message


def prompt_text(message: dict[str, Any]) -> str:
    return "\n".join(p["text"] for p in message["parts"] if p.get("type") == "text" and isinstance(p.get("text"), str))


def with_prompt_text(message: dict[str, Any], text: str) -> dict[str, Any]:
    """Every text part collapsed into one replacement, where the first was; other parts kept."""
    parts: list[dict[str, Any]] = []
    replaced = False
    for part in message["parts"]:
        if part.get("type") == "text":
            if not replaced:
                parts.append({"type": "text", "text": text})
                replaced = True
            continue
        parts.append(part)
    if not replaced:
        parts.insert(0, {"type": "text", "text": text})
    return {**message, "parts": parts}


def user_content(message: dict[str, Any]) -> str | list[UserContent]:
    """The model-side prompt: text parts and file attachments (data URLs or http(s) URLs).

    Text alone is one string, as a model request usually carries it.
    """
    content: list[UserContent] = []
    for part in message["parts"]:
        kind = part.get("type")
        if kind == "text" and isinstance(part.get("text"), str):
            content.append(part["text"])
        elif kind == "file" and isinstance(part.get("url"), str):
            url: str = part["url"]
            media_type = str(part.get("mediaType") or "")
            if url.startswith("data:"):
                content.append(BinaryContent.from_data_uri(url))
            elif url.startswith(("https://", "http://")):
                content.append(ImageUrl(url=url) if media_type.startswith("image/") else DocumentUrl(url=url))
    if all(isinstance(item, str) for item in content):
        return "\n".join(item for item in content if isinstance(item, str))
    return content
