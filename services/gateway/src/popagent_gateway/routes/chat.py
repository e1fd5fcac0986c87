"""POST /api/chat: one turn of the popagent supervisor, streamed as the AI SDK UI message stream."""

from __future__ import annotations

from typing import Any, Literal

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel
from pydantic_ai.ui.vercel_ai.request_types import UIMessage

from popagent.agent_runner.v1 import agent_runner_pb2
from popagent_core.errors import InvalidArgument
from popagent_core.redaction import redact_tool_payload
from popagent_gateway.configured_models import ensure_turn_models
from popagent_gateway.deps import AgentRunnerStateStub, ModelCatalogDep, runner_for_session
from popagent_gateway.streaming import UI_STREAM_HEADERS, sse_body
from popagent_gateway.wire import WARNING_HEADER

router = APIRouter()

MAX_PARTS = 64


class UserMessage(UIMessage):
    role: Literal["user"]  # type: ignore[assignment]


class ChatRequest(BaseModel):
    """Only the session, the model, the workspace and the newest message: history is rebuilt
    server-side and callers cannot inject tools or execution options."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)

    id: str = Field(min_length=1, max_length=128, description="session id")
    model: str | None = Field(default=None, min_length=1, max_length=200)
    workspace_id: str | None = Field(default=None, min_length=1, max_length=128)
    message: UserMessage


_TOOL_PAYLOADS = (("input", "input"), ("output", "output"), ("errorText", "error"))


def redacted_message(message: UserMessage) -> bytes:
    """The message as it goes further: payloads of retired secret tools replaced by `[redacted]`
    (and browser-secret payloads cut to their metadata), the spec's redaction at chat ingress."""
    raw: dict[str, Any] = message.model_dump(mode="json", by_alias=True, exclude_none=True)
    for part in raw["parts"]:
        kind = part.get("type", "")
        if kind.startswith("tool-"):
            tool = kind.removeprefix("tool-")
            for key, phase in _TOOL_PAYLOADS:
                if key in part:
                    part[key] = redact_tool_payload(tool, part[key], phase)  # type: ignore[arg-type]
    return orjson.dumps(raw)


@router.post("/chat", response_class=StreamingResponse)
async def chat(
    body: ChatRequest, request: Request, catalog: ModelCatalogDep, state: AgentRunnerStateStub
) -> StreamingResponse:
    """Run one chat turn and stream it (AI SDK UI message stream v1 over SSE)."""
    if not body.message.parts or len(body.message.parts) > MAX_PARTS:
        raise InvalidArgument(f"message must have 1 to {MAX_PARTS} parts")
    # An unknown model (the request's, the default or an override the turn may use) is refused
    # (400) before the turn starts; a catalog outage fails open.
    warning = await ensure_turn_models(catalog, state, body.model)
    call = runner_for_session(request, body.id).Chat(
        agent_runner_pb2.ChatRequest(
            session_id=body.id,
            model=body.model or "",
            workspace_id=body.workspace_id or "",
            message_json=redacted_message(body.message).decode(),
        )
    )
    # Read the first batch before answering: an unknown session or a refused request is
    # then a plain HTTP error (404/400) instead of an error inside a 200 stream.
    batches = aiter(call)
    try:
        first = await anext(batches, agent_runner_pb2.TurnEventBatch())
    except BaseException:
        call.cancel()
        raise
    headers = {**UI_STREAM_HEADERS, WARNING_HEADER: warning} if warning else UI_STREAM_HEADERS
    return StreamingResponse(sse_body(first, batches, call), media_type="text/event-stream", headers=headers)
