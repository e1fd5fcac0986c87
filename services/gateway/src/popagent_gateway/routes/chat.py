"""Chat turns: POST /api/chat runs one turn of the popagent supervisor and streams it as the AI SDK
UI message stream; GET /api/chat/{sessionId}/stream follows the session's running turn (the AI
SDK's resume route); POST /api/sessions/{id}/turns/{turnId}/cancel stops a turn (docs/turns.md)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Annotated, Literal

import grpc
import orjson
from fastapi import APIRouter, Header, Path, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic_ai.ui.vercel_ai.request_types import ToolApprovalResponded

from popagent.agent_runner.v1 import agent_runner_pb2, agent_runner_pb2_grpc
from popagent_core.errors import FailedPrecondition, InvalidArgument
from popagent_core.redaction import redact_ui_message
from popagent_gateway.catalog import ModelCatalog
from popagent_gateway.configured_models import check_turn_models
from popagent_gateway.deps import AgentRunnerStateStub, ModelCatalogDep, on_session_runner
from popagent_gateway.dto import ErrorOut
from popagent_gateway.dto.chat import (
    APPROVAL_ANSWER_REQUIRED,
    MAX_PARTS,
    ApprovalResponseMessage,
    CancelledTurnOut,
    ChatTurnCreate,
    RunningTurnOut,
    UserMessage,
)
from popagent_gateway.streaming import UI_STREAM_HEADERS, PendingCheck, sse_body
from popagent_gateway.wire import WARNING_HEADER

logger = logging.getLogger(__name__)
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

# The client's AI SDK major, which its transport sends on both chat routes (DefaultChatTransport's
# `headers`, or `prepareReconnectToStreamRequest` for the resume): the AI SDK itself sends no version,
# and ai 5 fails a whole stream on a chunk type it does not know (docs/approvals.md, Answering).
AI_SDK_HEADER = "x-popagent-ai-sdk"
AiSdkMajor = Annotated[
    Literal["5", "6", "7"],
    Header(
        alias=AI_SDK_HEADER,
        description="the AI SDK major of the client (`ai` 5, 6 or 7; absent: 6). With 5, a tool approval "
        "request arrives as a text part saying what waits and how to answer it (POST /api/approvals/{id}), and "
        "a denied call as its tool-output-error, since ai 5 has neither approval chunk; 6 and 7 get the "
        "tool-approval-request and tool-output-denied chunks",
    ),
]

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
    body: ChatTurnCreate,
    request: Request,
    catalog: ModelCatalogDep,
    state: AgentRunnerStateStub,
    ai_sdk: AiSdkMajor = "6",
) -> StreamingResponse | JSONResponse:
    """Run one chat turn and stream it (AI SDK UI message stream v1 over SSE); or, for the running
    turn's assistant message with answered tool approvals, take the answers and stream the rest of it."""
    if isinstance(body.message, ApprovalResponseMessage):
        return await _answer_approvals(body.id, body.message, request, state, int(ai_sdk))
    turn, warning = await turn_request(body, body.message, catalog, state)
    started = await start_turn(request, turn)
    if isinstance(started, JSONResponse):
        return started
    call, batches, first = started
    headers = {**UI_STREAM_HEADERS, WARNING_HEADER: warning} if warning else UI_STREAM_HEADERS

    # Its runner gone mid-turn (killed, cut off): the stream goes on from the turn's log, through
    # another runner, which follows the turn as the runner that takes it over runs it; unless this
    # gateway is stopping too (the whole stack is), when the stream ends with an error chunk now.
    async def resume() -> FollowedTurn | None:
        if request.app.state.stopping:
            return None
        return await followed_turn(request, body.id)

    return StreamingResponse(
        sse_body(first, batches, call, pending=pending_check(state, body.id), resume=resume, ai_sdk=int(ai_sdk)),
        media_type="text/event-stream",
        headers=headers,
    )


async def turn_request(
    body: ChatTurnCreate, message: UserMessage, catalog: ModelCatalog, state: AgentRunnerStateStub
) -> tuple[agent_runner_pb2.ChatRequest, str | None]:
    """The new turn's request to agent-runner, with the model catalog's warning (None: nothing to warn
    of). Shared by POST /api/chat and the MCP `chat` tool, so both refuse the same turns."""
    if not message.parts or len(message.parts) > MAX_PARTS:
        raise InvalidArgument(f"message must have 1 to {MAX_PARTS} parts")
    # An unknown model (the request's, the default or an override the turn may use) is refused
    # (400) before the turn starts; a catalog outage fails open.
    models = await check_turn_models(catalog, state, body.model)
    turn = agent_runner_pb2.ChatRequest(
        session_id=body.id,
        model=body.model or "",
        workspace_id=body.workspace_id or "",
        message_json=redacted_message(message).decode(),
        check_models=models.listed_models is not None,
        listed_models=models.listed_models or (),
        double_texting=body.double_texting or "",
    )
    return turn, models.warning


async def _answer_approvals(
    session_id: str, message: ApprovalResponseMessage, request: Request, state: AgentRunnerStateStub, ai_sdk: int
) -> StreamingResponse:
    """The AI SDK's tool approval answers (`addToolApprovalResponse`, then the assistant message sent
    back): each `approval-responded` part's answer is taken (an approval answered already, here or
    elsewhere, keeps its first answer), and the running turn streams on from after those requests."""
    answers = [
        approval
        for part in message.parts
        if getattr(part, "state", None) == "approval-responded"
        and isinstance(approval := getattr(part, "approval", None), ToolApprovalResponded)
    ]
    if not answers:
        raise InvalidArgument(APPROVAL_ANSWER_REQUIRED)
    for answer in answers:
        decision = agent_runner_pb2.APPROVE_ONCE if answer.approved else agent_runner_pb2.DENY
        try:
            await state.AnswerApproval(
                agent_runner_pb2.AnswerApprovalRequest(
                    approval_id=answer.id, decision=decision, reason=answer.reason or "", answered_by="chat"
                )
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() is not grpc.StatusCode.FAILED_PRECONDITION:
                raise
    call, batches, first = await followed_turn(request, session_id)
    if first is None:
        raise FailedPrecondition("no turn runs on this session: the answered approvals have nothing to go on with")
    return StreamingResponse(
        sse_body(
            first,
            batches,
            call,
            after_approvals=[answer.id for answer in answers],
            pending=pending_check(state, session_id),
            ai_sdk=ai_sdk,
        ),
        media_type="text/event-stream",
        headers=UI_STREAM_HEADERS,
    )


def pending_check(state: AgentRunnerStateStub, session_id: str) -> PendingCheck:
    """Whether any of the approvals a stream just requested still waits for its answer."""

    async def pending(approval_ids: list[str]) -> bool:
        try:
            listed = await state.ListApprovals(
                agent_runner_pb2.ListApprovalsRequest(state="pending", session_id=session_id)
            )
        except grpc.aio.AioRpcError as exc:
            # Not known: the stream goes on (the turn waits either way; a client can still answer).
            logger.warning("approvals could not be read", extra={"code": exc.code().name})
            return False
        return any(approval.id in approval_ids for approval in listed.approvals)

    return pending


TurnCall = grpc.aio.UnaryStreamCall[agent_runner_pb2.ChatRequest, agent_runner_pb2.TurnEventBatch]
FollowCall = grpc.aio.UnaryStreamCall[agent_runner_pb2.FollowTurnRequest, agent_runner_pb2.TurnEventBatch]
FollowedTurn = tuple[FollowCall, AsyncIterator[agent_runner_pb2.TurnEventBatch], agent_runner_pb2.TurnEventBatch | None]


# A started turn: its call, its batches and the first of them (already read).
StartedTurn = tuple[TurnCall, AsyncIterator[agent_runner_pb2.TurnEventBatch], agent_runner_pb2.TurnEventBatch]


async def start_turn(request: Request, turn: agent_runner_pb2.ChatRequest) -> StartedTurn | JSONResponse:
    """The turn's call on the session's agent-runner, with its first batch; the 409 of a refused double text."""

    async def start(runner: agent_runner_pb2_grpc.AgentRunnerServiceStub) -> StartedTurn:
        # No deadline (POPAGENT_GATEWAY_RPC_TIMEOUT_S covers unary calls only): a turn streams for as
        # long as it works. A client that goes away detaches (sse_body cancels the call); the turn
        # runs on unless the agent-runtime setting continueOnDisconnect is off.
        call = runner.Chat(turn)
        # Read the first batch before answering: an unknown session or a refused request is
        # then a plain HTTP error (404/400) instead of an error inside a 200 stream.
        batches = aiter(call)
        try:
            return call, batches, await anext(batches, agent_runner_pb2.TurnEventBatch())
        except BaseException:
            call.cancel()
            raise

    try:
        return await on_session_runner(request, turn.session_id, agent_runner_pb2_grpc.AgentRunnerServiceStub, start)
    except grpc.aio.AioRpcError as exc:
        running = dict(exc.trailing_metadata() or ()).get(RUNNING_TURN_TRAILER)
        if exc.code() is grpc.StatusCode.ABORTED and running:
            # Double texting refused: a turn is running on this session.
            return JSONResponse({"error": exc.details(), "runningTurnId": running}, status_code=409)
        raise


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
    state: AgentRunnerStateStub,
    last_event_id: Annotated[
        str,
        Header(
            pattern=r"^([0-9]{1,12})?$",
            description="the id of the last chunk the client has (a chunk number): the stream resumes after it; "
            "empty: from the first chunk",
        ),
    ] = "",
    ai_sdk: AiSdkMajor = "6",
) -> Response:
    """Follow the session's running turn: what it streamed so far, then the rest as it comes (the AI
    SDK's `useChat({ resume: true })` route). Leaving this stream never stops the turn."""
    first_id = int(last_event_id) + 1 if last_event_id else 0
    call, batches, first = await followed_turn(request, session_id)
    if first is None:
        return Response(status_code=204)
    return StreamingResponse(
        sse_body(first, batches, call, first_id=first_id, pending=pending_check(state, session_id), ai_sdk=int(ai_sdk)),
        media_type="text/event-stream",
        headers=UI_STREAM_HEADERS,
    )


async def followed_turn(request: Request, session_id: str) -> FollowedTurn:
    """The session's running turn read from its log on an agent-runner: the call, its batches and the
    first one (None: no turn runs)."""

    async def follow(runner: agent_runner_pb2_grpc.AgentRunnerServiceStub) -> FollowedTurn:
        call = runner.FollowTurn(agent_runner_pb2.FollowTurnRequest(session_id=session_id))
        batches = aiter(call)
        try:
            return call, batches, await anext(batches, None)
        except BaseException:
            call.cancel()
            raise

    return await on_session_runner(request, session_id, agent_runner_pb2_grpc.AgentRunnerServiceStub, follow)


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
    cancel = agent_runner_pb2.CancelTurnRequest(session_id=session_id, turn_id=turn_id)
    answer = await on_session_runner(
        request, session_id, agent_runner_pb2_grpc.AgentRunnerServiceStub, lambda runner: runner.CancelTurn(cancel)
    )
    return CancelledTurnOut(turn_id=answer.turn_id, status=answer.status)
