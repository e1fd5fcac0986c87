"""A chat turn started and read to its end outside the UI stream: what the MCP `chat` tool
(mcp_server.py) and the A2A agent (a2a_agent.py) share. The turn starts exactly as POST /api/chat
starts one (routes/chat.py), so both are refused as an /api client is, with the same texts."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import grpc
import orjson
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from popagent_core.errors import Conflict, PopagentError
from popagent_gateway.deps import get_agent_runner_state, get_model_catalog
from popagent_gateway.dto.chat import ChatTurnCreate, UserMessage
from popagent_gateway.dto.sessions import SessionCreate
from popagent_gateway.errors import client_message
from popagent_gateway.routes import chat, sessions
from popagent_gateway.streaming import PendingCheck


def refusal_text(exc: Exception) -> str | None:
    """The text an /api client reads for this refusal (a service's, a DTO's or the gateway's own);
    None for any other exception, which is no refusal but a fault."""
    if isinstance(exc, grpc.aio.AioRpcError):
        return client_message(exc.code(), exc.details() or "")
    if isinstance(exc, PopagentError):
        return client_message(exc.grpc_code, str(exc))
    if isinstance(exc, ValidationError):
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'input'}: {e['msg']}" for e in exc.errors())
        return f"invalid input: {problems}"
    return None


async def start_chat_turn(
    request: Request,
    prompt: str,
    *,
    session_id: str,
    create_session: bool,
    model: str | None = None,
    workspace_id: str | None = None,
    message_id_prefix: str,
) -> tuple[chat.StartedTurn, str | None]:
    """The started turn on `session_id` with the model catalog's warning (None: nothing to warn of).
    With `create_session`, the session is created once the turn passed its checks, so a refused turn
    leaves no empty session behind; one that exists already is continued. A turn already running on
    the session refuses this one (`Conflict`, naming it), as POST /api/chat answers 409."""
    state = await get_agent_runner_state(request)
    body = ChatTurnCreate.model_validate(
        {
            "id": session_id,
            "model": model,
            "workspaceId": workspace_id,
            "message": {
                "id": f"{message_id_prefix}-{uuid.uuid4().hex}",
                "role": "user",
                "parts": [{"type": "text", "text": prompt}],
            },
        }
    )
    assert isinstance(body.message, UserMessage)  # the role above says so
    turn, warning = await chat.turn_request(body, body.message, await get_model_catalog(request), state)
    if create_session:
        created = {"id": session_id, **({"workspaceId": workspace_id} if workspace_id else {})}
        try:
            await sessions.new_session(SessionCreate.model_validate(created), request)
        except grpc.aio.AioRpcError as exc:
            if exc.code() is not grpc.StatusCode.ALREADY_EXISTS:
                raise
    started = await chat.start_turn(request, turn)
    if isinstance(started, JSONResponse):
        refused = orjson.loads(bytes(started.body))
        raise Conflict(f"{refused['error']} (running turn {refused['runningTurnId']})")
    return started, warning


@dataclass
class FollowedTurn:
    """What a chat turn's events said: its answer, the approvals it waits for, how it ended."""

    turn_id: str = ""
    # Text parts by id, in the order they began: the answer is all of them.
    texts: dict[str, str] = field(default_factory=dict[str, str])
    tool_names: dict[str, str] = field(default_factory=dict[str, str])
    approvals: list[dict[str, str]] = field(default_factory=list[dict[str, str]])
    # The approvals requested in the last batch read.
    requested: list[str] = field(default_factory=list[str])
    failure: str | None = None
    # Ended by a cancel (its abort event), wherever it was asked for.
    cancelled: bool = False
    received_chars: int = 0

    def read(self, batch: pb.TurnEventBatch) -> str:
        """Take in one batch; the text it added."""
        added: list[str] = []
        self.requested = []
        for event in batch.events:
            kind = event.WhichOneof("event")
            if kind == "start":
                # The turn begins (again, when another runner took it over): only this attempt answers.
                self.turn_id, self.texts, self.approvals = event.start.turn_id, {}, []
            elif kind == "text_delta":
                part = event.text_delta.part_id
                self.texts[part] = self.texts.get(part, "") + event.text_delta.delta
                added.append(event.text_delta.delta)
            elif kind == "tool_input":
                self.tool_names[event.tool_input.tool_call_id] = event.tool_input.tool_name
            elif kind == "approval_request":
                request = event.approval_request
                self.approvals.append(
                    {
                        "approvalId": request.approval_id,
                        "toolName": self.tool_names.get(request.tool_call_id, ""),
                        "reason": request.reason,
                    }
                )
                self.requested.append(request.approval_id)
            elif kind == "error":
                self.failure = event.error.message or event.error.error_class
            elif kind == "abort":
                self.failure, self.cancelled = "the turn was cancelled", True
        text = "".join(added)
        self.received_chars += len(text)
        return text

    @property
    def answer(self) -> str:
        return "\n\n".join(text.strip() for text in self.texts.values() if text.strip())

    @property
    def waiting_approvals(self) -> list[dict[str, str]]:
        """The approvals the turn stopped for (those its last batch requested)."""
        return [approval for approval in self.approvals if approval["approvalId"] in self.requested]


# Told each piece of text as it arrives, with the turn read so far.
TextSink = Callable[[FollowedTurn, str], Awaitable[None]]


async def follow_turn(
    started: chat.StartedTurn, pending: PendingCheck, on_text: TextSink, followed: FollowedTurn
) -> bool:
    """Read the turn into `followed` to its end (False), or until it waits for an approval it requested
    (True), as the chat stream pauses. The call is cancelled either way, which detaches from the turn as
    a closed chat stream does. A broken stream raises its `grpc.aio.AioRpcError`: the turn may go on."""
    call, batches, first = started
    try:
        if await _read_batch(followed, first, pending, on_text):
            return True
        async for batch in batches:
            if await _read_batch(followed, batch, pending, on_text):
                return True
        return False
    finally:
        call.cancel()


async def _read_batch(
    followed: FollowedTurn, batch: pb.TurnEventBatch, pending: PendingCheck, on_text: TextSink
) -> bool:
    added = followed.read(batch)
    if added:
        await on_text(followed, added)
    return bool(followed.requested) and await pending(followed.requested)
