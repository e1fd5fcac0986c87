"""/api routes backed by the hooks service: the hook audit of one session."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from pydantic import BaseModel

from popagent.hooks.v1 import hooks_pb2
from popagent_gateway.deps import HooksStub

router = APIRouter(tags=["hooks"])

RPC_TIMEOUT_S = 10.0
MAX_SESSION_ID_CHARS = 200

SessionId = Annotated[str, Path(min_length=1, max_length=MAX_SESSION_ID_CHARS)]


class HookRunOut(BaseModel):
    id: str
    # Spec event name: "PreToolUse", "Stop", ...
    event: str
    handlerId: str
    # "pass", "deny", "modify" or "continue"
    outcome: str
    # "transport", "timeout", "malformed_response", "event_outcome"; null when the handler answered validly.
    failureClass: str | None
    durationMs: int
    sessionId: str
    turnId: str | None
    toolCallId: str | None
    target: str | None
    eventId: str
    reason: str
    createdAt: str
    # Whether the request to the handler carried a webhook-signature (the handler has a secret).
    signed: bool


class HookRunListOut(BaseModel):
    runs: list[HookRunOut]


def _spec_name(proto_name: str) -> str:
    """`PRE_TOOL_USE` -> `PreToolUse` (the names of shared/spec/AGENTS_HOOKS.md)."""
    return "".join(part.capitalize() for part in proto_name.split("_"))


def _out(run: hooks_pb2.HookRun) -> HookRunOut:
    return HookRunOut(
        id=run.id,
        event=_spec_name(hooks_pb2.HookEvent.Name(run.event)),
        handlerId=run.handler_id,
        outcome=hooks_pb2.Outcome.Name(run.outcome).lower(),
        failureClass=run.failure_class or None,
        durationMs=run.duration_ms,
        sessionId=run.session_id,
        turnId=run.turn_id or None,
        toolCallId=run.tool_call_id or None,
        target=run.target or None,
        eventId=run.event_id,
        reason=run.reason,
        createdAt=run.created_at,
        signed=run.signed,
    )


@router.get("/sessions/{session_id}/hooks", response_model=HookRunListOut)
async def list_session_hooks(session_id: SessionId, stub: HooksStub) -> HookRunListOut:
    """The latest 500 hook audit records of a session, oldest first; group them by turnId."""
    response = await stub.ListSessionRuns(
        hooks_pb2.ListSessionRunsRequest(session_id=session_id), timeout=RPC_TIMEOUT_S
    )
    return HookRunListOut(runs=[_out(run) for run in response.runs])
