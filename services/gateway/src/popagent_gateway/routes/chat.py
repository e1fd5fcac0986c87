"""Chat turns: POST /api/chat runs one turn of the popagent supervisor and streams it as the AI SDK
UI message stream; GET /api/chat/{sessionId}/stream follows the session's running turn (the AI
SDK's resume route); POST /api/sessions/{id}/turns/{turnId}/cancel stops a turn (docs/turns.md)."""

from __future__ import annotations

from typing import Annotated

import grpc
import orjson
from fastapi import APIRouter, Header, Path, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from popagent.agent_runner.v1 import agent_runner_pb2
from popagent_core.errors import InvalidArgument
from popagent_core.redaction import redact_ui_message
from popagent_gateway.configured_models import check_turn_models
from popagent_gateway.deps import AgentRunnerStateStub, ModelCatalogDep, runner_for_session
from popagent_gateway.dto import ErrorOut
from popagent_gateway.dto.chat import MAX_PARTS, CancelledTurnOut, ChatTurnCreate, RunningTurnOut, UserMessage
from popagent_gateway.streaming import UI_STREAM_HEADERS, sse_body
from popagent_gateway.wire import WARNING_HEADER

router = APIRouter()

SessionId = Annotated[str, Path(min_length=1, max_length=128)]
TurnId = Annotated[str, Path(min_length=1, max_length=128)]

# The schema of one SSE event of a turn's stream (as OpenAPI 3.2's itemSchema says it, and Schemathesis reads it).
UI_STREAM_CONTENT = {
    "text/event-stream": {
        "schema": {
            "type": "object",
            "properties": {
                "data": {"type": "string", "description": "one UI message stream chunk (JSON), or [DONE]"},
                "id": {"type": "string", "description": "the chunk's number in its turn, from 0"},
                "event": {"type": "string", "enum": ["message"]},
            },
            "required": ["data"],
        }
    }
}
UI_STREAM_HEADERS_DOC = {"x-vercel-ai-ui-message-stream": {"schema": {"type": "string", "enum": ["v1"]}}}

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
            "description": "The turn as the AI SDK UI message stream v1 over SSE (`id: <n>` and "
            "`data: <chunk JSON>` events, ending with `data: [DONE]`)",
            "content": UI_STREAM_CONTENT,
            "headers": UI_STREAM_HEADERS_DOC,
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
    # long as it works. A client that goes away detaches (sse_body cancels the call); the turn runs
    # on unless the agent-runtime setting continueOnDisconnect is off.
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


@router.get(
    "/chat/{session_id}/stream",
    response_class=StreamingResponse,
    response_model=None,
    status_code=200,
    responses={
        200: {
            "description": "The session's running turn from its first chunk (or after `Last-Event-ID`), "
            "then live until it ends: the same events POST /api/chat streams",
            "content": UI_STREAM_CONTENT,
            "headers": UI_STREAM_HEADERS_DOC,
        },
        204: {"description": "No turn is running on the session"},
        404: {"model": ErrorOut, "description": "Unknown session"},
    },
)
async def follow_chat(
    session_id: SessionId,
    request: Request,
    last_event_id: Annotated[
        str,
        Header(
            pattern=r"^([0-9]{1,12})?$",
            description="the id of the last chunk the client has (a chunk number): the stream resumes after it; "
            "empty: from the first chunk",
        ),
    ] = "",
) -> Response:
    """Follow the session's running turn: what it streamed so far, then the rest as it comes (the AI
    SDK's `useChat({ resume: true })` route). Leaving this stream never stops the turn."""
    first_id = int(last_event_id) + 1 if last_event_id else 0
    call = runner_for_session(request, session_id).FollowTurn(agent_runner_pb2.FollowTurnRequest(session_id=session_id))
    batches = aiter(call)
    try:
        first = await anext(batches, None)
    except BaseException:
        call.cancel()
        raise
    if first is None:
        return Response(status_code=204)
    return StreamingResponse(
        sse_body(first, batches, call, first_id=first_id), media_type="text/event-stream", headers=UI_STREAM_HEADERS
    )


@router.post(
    "/sessions/{session_id}/turns/{turn_id}/cancel",
    response_model=CancelledTurnOut,
    responses={
        404: {"model": ErrorOut, "description": "No such turn on the session"},
        409: {"model": ErrorOut, "description": "The turn already ended"},
    },
)
async def cancel_turn(session_id: SessionId, turn_id: TurnId, request: Request) -> CancelledTurnOut:
    """Cancel a running turn wherever a client follows it: its stream ends with an `abort` chunk and
    what it answered so far is stored, marked cancelled."""
    answer = await runner_for_session(request, session_id).CancelTurn(
        agent_runner_pb2.CancelTurnRequest(session_id=session_id, turn_id=turn_id)
    )
    return CancelledTurnOut(turn_id=answer.turn_id, status=answer.status)
