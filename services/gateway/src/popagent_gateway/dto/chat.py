"""POST /api/chat: the body of one chat turn."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel
from pydantic_ai.ui.vercel_ai.request_types import ToolApprovalResponded, UIMessage

from popagent_gateway.dto import WireModel
from popagent_gateway.dto.sessions import DoubleTexting

MAX_PARTS = 64
MAX_MESSAGE_ID_CHARS = 128
APPROVAL_ANSWER_REQUIRED = (
    "an assistant message must answer at least one tool approval (a tool part in state approval-responded "
    "with approval {id, approved})"
)


def _parts_bounds(schema: dict[str, Any]) -> None:
    # What the chat route checks (an id of 1 to MAX_MESSAGE_ID_CHARS, 1 to MAX_PARTS parts), declared.
    schema["properties"]["id"].update(minLength=1, maxLength=MAX_MESSAGE_ID_CHARS)
    schema["properties"]["parts"].update(minItems=1, maxItems=MAX_PARTS)


class UserMessage(UIMessage):
    model_config = ConfigDict(json_schema_extra=_parts_bounds)

    role: Literal["user"]  # type: ignore[assignment]


def _answers_bounds(schema: dict[str, Any]) -> None:
    # What the validator below checks, declared: at least one part answers an approval.
    _parts_bounds(schema)
    schema["properties"]["parts"]["contains"] = {
        "type": "object",
        "properties": {
            "state": {"const": "approval-responded"},
            "approval": {
                "type": "object",
                "properties": {"id": {"type": "string"}, "approved": {"type": "boolean"}},
                "required": ["id", "approved"],
            },
        },
        "required": ["state", "approval"],
    }


class ApprovalResponseMessage(UIMessage):
    """The AI SDK's way to answer tool approvals (`addToolApprovalResponse`): the assistant message of the
    running turn, its answered tool parts `approval-responded` with `approval: {id, approved, reason}`."""

    model_config = ConfigDict(json_schema_extra=_answers_bounds)

    role: Literal["assistant"]  # type: ignore[assignment]

    @model_validator(mode="after")
    def _answers_an_approval(self) -> ApprovalResponseMessage:
        if not any(
            getattr(part, "state", None) == "approval-responded"
            and isinstance(getattr(part, "approval", None), ToolApprovalResponded)
            for part in self.parts
        ):
            raise ValueError(APPROVAL_ANSWER_REQUIRED)
        return self


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
    message: UserMessage | ApprovalResponseMessage = Field(
        discriminator="role",
        description="the newest user message (a new turn), or the running turn's assistant message whose tool "
        "parts answer approvals (`approval-responded`): the answers are taken and the turn's stream goes on",
    )
    double_texting: DoubleTexting | None = Field(
        default=None, description="what this turn does if one is already running on the session; unset: the session's"
    )


class RunningTurnOut(WireModel):
    """409 of POST /api/chat: the doubleTexting policy is 'reject' and a turn runs or waits on the session."""

    error: str
    running_turn_id: str


class CancelledTurnOut(WireModel):
    """POST /api/sessions/{id}/turns/{turnId}/cancel: the turn, now cancelled."""

    turn_id: str
    status: str
