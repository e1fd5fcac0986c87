"""POST /api/chat: one turn of the popagent supervisor, streamed as the AI SDK UI message stream."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel
from pydantic_ai.ui.vercel_ai.request_types import UIMessage

from popagent.agent_runner.v1 import agent_runner_pb2
from popagent_core.errors import InvalidArgument
from popagent_gateway.deps import AgentRunnerStub
from popagent_gateway.streaming import UI_STREAM_HEADERS, sse_body

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


@router.post("/chat", response_class=StreamingResponse)
async def chat(body: ChatRequest, runner: AgentRunnerStub) -> StreamingResponse:
    """Run one chat turn and stream it (AI SDK UI message stream v1 over SSE)."""
    if not body.message.parts or len(body.message.parts) > MAX_PARTS:
        raise InvalidArgument(f"message must have 1 to {MAX_PARTS} parts")
    call = runner.Chat(
        agent_runner_pb2.ChatRequest(
            session_id=body.id,
            model=body.model or "",
            workspace_id=body.workspace_id or "",
            message_json=body.message.model_dump_json(by_alias=True, exclude_none=True),
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
    return StreamingResponse(
        sse_body(first, batches, call),
        media_type="text/event-stream",
        headers=UI_STREAM_HEADERS,
    )
