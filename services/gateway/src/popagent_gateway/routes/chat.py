"""POST /api/chat: one turn of the popagent supervisor, streamed as the AI SDK UI message stream."""

from __future__ import annotations

import grpc
import orjson
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from popagent.agent_runner.v1 import agent_runner_pb2
from popagent_core.errors import InvalidArgument
from popagent_core.redaction import redact_ui_message
from popagent_gateway.configured_models import check_turn_models
from popagent_gateway.deps import AgentRunnerStateStub, ModelCatalogDep, runner_for_session
from popagent_gateway.dto import ErrorOut
from popagent_gateway.dto.chat import MAX_PARTS, ChatTurnCreate, RunningTurnOut, UserMessage
from popagent_gateway.streaming import UI_STREAM_HEADERS, sse_body
from popagent_gateway.wire import WARNING_HEADER

router = APIRouter()

# agent-runner's trailer naming the running turn when double texting is refused (its servicers/chat.py).
RUNNING_TURN_TRAILER = "popagent-running-turn-id"


def redacted_message(message: UserMessage) -> bytes:
    """The message as it goes further, through the kernel's one redaction of secret-bearing
    tool parts (docs/hooks.md, Redaction: chat ingress is redacted as hook payloads are)."""
    return orjson.dumps(redact_ui_message(message.model_dump(mode="json", by_alias=True, exclude_none=True)))


@router.post(
    "/chat",
    response_class=StreamingResponse,
    response_model=None,
    responses={
        200: {
            "description": "The turn as the AI SDK UI message stream v1 over SSE (`data: <chunk JSON>` events, "
            "ending with `data: [DONE]`)",
            # The schema of one event (as OpenAPI 3.2's itemSchema says it, and Schemathesis reads it).
            "content": {
                "text/event-stream": {
                    "schema": {
                        "type": "object",
                        "properties": {
                            "data": {"type": "string", "description": "one UI message stream chunk (JSON), or [DONE]"},
                            "event": {"type": "string", "enum": ["message"]},
                        },
                        "required": ["data"],
                    }
                }
            },
            "headers": {
                "x-vercel-ai-ui-message-stream": {"schema": {"type": "string", "enum": ["v1"]}},
            },
        },
        409: {
            # The running turn (double texting refused), or another state of the session that refuses
            # the turn (its workspace is not the one named): the error tree's shape.
            "model": RunningTurnOut | ErrorOut,
            "description": "Conflict: a turn is already running on this session (with its id), or the session's "
            "state refuses this turn",
        },
    },
)
async def chat(
    body: ChatTurnCreate, request: Request, catalog: ModelCatalogDep, state: AgentRunnerStateStub
) -> StreamingResponse | JSONResponse:
    """Run one chat turn and stream it (AI SDK UI message stream v1 over SSE)."""
    if not body.message.parts or len(body.message.parts) > MAX_PARTS:
        raise InvalidArgument(f"message must have 1 to {MAX_PARTS} parts")
    # An unknown model (the request's, the default or an override the turn may use) is refused
    # (400) before the turn starts; a catalog outage fails open.
    models = await check_turn_models(catalog, state, body.model)
    # No deadline (POPAGENT_GATEWAY_RPC_TIMEOUT_S covers unary calls only): a turn streams for as
    # long as it works, and ends when it finishes or the client goes away (sse_body cancels the call).
    call = runner_for_session(request, body.id).Chat(
        agent_runner_pb2.ChatRequest(
            session_id=body.id,
            model=body.model or "",
            workspace_id=body.workspace_id or "",
            message_json=redacted_message(body.message).decode(),
            check_models=models.listed_models is not None,
            listed_models=models.listed_models or (),
        )
    )
    # Read the first batch before answering: an unknown session or a refused request is
    # then a plain HTTP error (404/400) instead of an error inside a 200 stream.
    batches = aiter(call)
    try:
        first = await anext(batches, agent_runner_pb2.TurnEventBatch())
    except grpc.aio.AioRpcError as exc:
        call.cancel()
        running = dict(exc.trailing_metadata() or ()).get(RUNNING_TURN_TRAILER)
        if exc.code() is grpc.StatusCode.ABORTED and running:
            # Double texting refused: a turn is running on this session.
            return JSONResponse({"error": exc.details(), "runningTurnId": running}, status_code=409)
        raise
    except BaseException:
        call.cancel()
        raise
    warning = models.warning
    headers = {**UI_STREAM_HEADERS, WARNING_HEADER: warning} if warning else UI_STREAM_HEADERS
    return StreamingResponse(sse_body(first, batches, call), media_type="text/event-stream", headers=headers)
