"""POST /api/chat: the body of one chat turn."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel
from pydantic_ai.ui.vercel_ai.request_types import UIMessage

from popagent_gateway.dto import WireModel

MAX_PARTS = 64
MAX_MESSAGE_ID_CHARS = 128


def _parts_bounds(schema: dict[str, Any]) -> None:
    # What the chat route checks (an id of 1 to MAX_MESSAGE_ID_CHARS, 1 to MAX_PARTS parts), declared.
    schema["properties"]["id"].update(minLength=1, maxLength=MAX_MESSAGE_ID_CHARS)
    schema["properties"]["parts"].update(minItems=1, maxItems=MAX_PARTS)


class UserMessage(UIMessage):
    model_config = ConfigDict(json_schema_extra=_parts_bounds)

    role: Literal["user"]  # type: ignore[assignment]


class ChatTurnCreate(BaseModel):
    """Only the session, the model, the workspace and the newest message: history is rebuilt
    server-side and callers cannot inject tools or execution options.

    Not a WireInput: the UI's chat transport sends `model: null` for "the default model",
    which a WireInput would refuse.
    """

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)

    id: str = Field(min_length=1, max_length=128, description="session id")
    model: str | None = Field(default=None, min_length=1, max_length=200)
    workspace_id: str | None = Field(default=None, min_length=1, max_length=128)
    message: UserMessage


class RunningTurnOut(WireModel):
    """409 of POST /api/chat: the session's doubleTexting is 'reject' and a turn is running on it."""

    error: str
    running_turn_id: str


class CancelledTurnOut(WireModel):
    """POST /api/sessions/{id}/turns/{turnId}/cancel: the turn, now cancelled."""

    turn_id: str
    status: str
