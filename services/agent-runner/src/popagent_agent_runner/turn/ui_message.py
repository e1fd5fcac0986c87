"""The newest user message as the UI sends it (AI SDK UI message JSON), parsed once at the edge of the turn."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from pydantic_ai.messages import BinaryContent, DocumentUrl, ImageUrl, UserContent

from popagent_agent_runner.attachments.prompt import model_parts
from popagent_agent_runner.attachments.store import LoadedAttachment
from popagent_core.errors import InvalidArgument

MAX_ID_CHARS = 128


@dataclass(frozen=True, slots=True)
class UserMessage:
    """A checked user UI message: its id, its prompt text, and the JSON object it is stored as.

    `ui` is the message as sent (or as a hook rewrote its text); the turn stores it unchanged and
    reads it only through this type.
    """

    id: str
    # Every text part joined by newlines: what hooks, recall and the outcome evidence read.
    text: str
    # How many file parts it carries.
    attachments: int
    ui: dict[str, Any]
    # The stored attachments its file parts name, by url (`with_files`, once the turn has loaded them).
    files: Mapping[str, LoadedAttachment] = field(default_factory=dict[str, LoadedAttachment], compare=False)

    @classmethod
    def parse(cls, message_json: str) -> UserMessage:
        """The newest UI message, checked to be a user message with an id and at least one part."""
        try:
            message = orjson.loads(message_json)
        except orjson.JSONDecodeError:
            raise InvalidArgument("message must be a JSON UI message") from None
        if not isinstance(message, dict) or message.get("role") != "user":
            raise InvalidArgument("message must be a user UI message")
        if not isinstance(message.get("id"), str) or not 1 <= len(message["id"]) <= MAX_ID_CHARS:
            raise InvalidArgument(f"message id must be 1 to {MAX_ID_CHARS} characters")
        parts = message.get("parts")
        if not isinstance(parts, list) or not parts or not all(isinstance(p, dict) for p in parts):
            raise InvalidArgument("message must have parts")
        return cls._of(message)

    @classmethod
    def of_text(cls, message_id: str, text: str) -> UserMessage:
        """A message of one text part (a task's prompt)."""
        return cls._of({"id": message_id, "role": "user", "parts": [{"type": "text", "text": text}]})

    @classmethod
    def _of(cls, message: dict[str, Any]) -> UserMessage:
        parts: list[dict[str, Any]] = message["parts"]
        return cls(
            id=message["id"],
            text="\n".join(p["text"] for p in parts if p.get("type") == "text" and isinstance(p.get("text"), str)),
            attachments=sum(1 for p in parts if p.get("type") == "file"),
            ui=message,
        )

    def with_text(self, text: str) -> UserMessage:
        """Every text part collapsed into one replacement, where the first was; other parts kept."""
        parts: list[dict[str, Any]] = []
        replaced = False
        for part in self.ui["parts"]:
            if part.get("type") == "text":
                if not replaced:
                    parts.append({"type": "text", "text": text})
                    replaced = True
                continue
            parts.append(part)
        if not replaced:
            parts.insert(0, {"type": "text", "text": text})
        return dataclasses.replace(self._of({**self.ui, "parts": parts}), files=self.files)

    def with_files(self, files: Mapping[str, LoadedAttachment]) -> UserMessage:
        return dataclasses.replace(self, files=files)

    def model_content(self) -> str | list[UserContent]:
        """The model-side prompt: text parts and file attachments (stored attachments, data URLs or http(s) URLs).

        Text alone is one string, as a model request usually carries it.
        """
        content: list[UserContent] = []
        for part in self.ui["parts"]:
            kind = part.get("type")
            if kind == "text" and isinstance(part.get("text"), str):
                content.append(part["text"])
            elif kind == "file" and isinstance(part.get("url"), str):
                url: str = part["url"]
                media_type = str(part.get("mediaType") or "")
                if url in self.files:
                    content.extend(model_parts(self.files[url]))
                elif url.startswith("data:"):
                    content.append(BinaryContent.from_data_uri(url))
                elif url.startswith(("https://", "http://")):
                    content.append(ImageUrl(url=url) if media_type.startswith("image/") else DocumentUrl(url=url))
        if all(isinstance(item, str) for item in content):
            return "\n".join(item for item in content if isinstance(item, str))
        return content
