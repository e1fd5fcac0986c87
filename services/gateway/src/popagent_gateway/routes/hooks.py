"""/api routes backed by the hooks service: the hook audit of one session."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from popagent.hooks.v1 import hooks_pb2
from popagent_gateway.deps import HooksStub
from popagent_gateway.dto.hooks import HookRunListOut, HookRunOut

router = APIRouter(tags=["hooks"])

MAX_SESSION_ID_CHARS = 200

SessionId = Annotated[str, Path(min_length=1, max_length=MAX_SESSION_ID_CHARS)]


def _spec_name(proto_name: str) -> str:
    """`PRE_TOOL_USE` -> `PreToolUse` (the event names of docs/hooks.md, Events)."""
    return "".join(part.capitalize() for part in proto_name.split("_"))


def _out(run: hooks_pb2.HookRun) -> HookRunOut:
    return HookRunOut(
        id=run.id,
        event=_spec_name(hooks_pb2.HookEvent.Name(run.event)),
        handler_id=run.handler_id,
        outcome=hooks_pb2.Outcome.Name(run.outcome).lower(),
        failure_class=run.failure_class or None,
        duration_ms=run.duration_ms,
        session_id=run.session_id,
        turn_id=run.turn_id or None,
        tool_call_id=run.tool_call_id or None,
        target=run.target or None,
        event_id=run.event_id,
        reason=run.reason,
        created_at=run.created_at,
        signed=run.signed,
    )


@router.get("/sessions/{session_id}/hooks", response_model=HookRunListOut)
async def list_session_hooks(session_id: SessionId, stub: HooksStub) -> HookRunListOut:
    """The latest 500 hook audit records of a session, oldest first; group them by turnId."""
    response = await stub.ListSessionRuns(hooks_pb2.ListSessionRunsRequest(session_id=session_id))
    return HookRunListOut(runs=[_out(run) for run in response.runs])
