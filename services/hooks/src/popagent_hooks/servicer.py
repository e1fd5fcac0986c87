"""HooksService: proto <-> domain only."""

from __future__ import annotations

import re
from typing import Any

import grpc
import orjson

from popagent.hooks.v1 import hooks_pb2, hooks_pb2_grpc
from popagent_core.errors import InvalidArgument
from popagent_hooks.audit import AuditRepo, AuditWriter, StoredRun, delete_session_runs
from popagent_hooks.config import HooksConfig
from popagent_hooks.dispatcher import Decision, Dispatcher, EventInput
from popagent_hooks_client.events import Event

MAX_DETAIL_BYTES = 1024 * 1024
MAX_ID_LENGTH = 200
# The event id is part of the `webhook-id` header, so it is held to header-safe characters.
_EVENT_ID = re.compile(r"^[A-Za-z0-9._:-]{0,128}$")


def _id(value: str, name: str) -> str:
    if len(value) > MAX_ID_LENGTH:
        raise InvalidArgument(f"{name} must be at most {MAX_ID_LENGTH} characters")
    return value


def _event_id(value: str) -> str:
    if not _EVENT_ID.match(value):
        raise InvalidArgument("event_id must be at most 128 characters of letters, digits and . _ : -")
    return value


def _detail(raw: bytes) -> dict[str, Any]:
    if not raw:
        return {}
    if len(raw) > MAX_DETAIL_BYTES:
        raise InvalidArgument(f"detail_json must be at most {MAX_DETAIL_BYTES} bytes")
    try:
        detail = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise InvalidArgument("detail_json must be a UTF-8 JSON object") from None
    if not isinstance(detail, dict):
        raise InvalidArgument("detail_json must be a UTF-8 JSON object")
    return detail


def event_input(request: hooks_pb2.DispatchRequest) -> EventInput:
    try:
        event = Event.from_proto(request.event)
    except ValueError:
        raise InvalidArgument("event is required") from None
    return EventInput(
        event=event,
        session_id=_id(request.session_id, "session_id"),
        turn_id=_id(request.turn_id, "turn_id"),
        tool_call_id=_id(request.tool_call_id, "tool_call_id"),
        model=_id(request.model, "model"),
        target=_id(request.target, "target"),
        detail=_detail(request.detail_json),
        event_id=_event_id(request.event_id),
    )


def decision_message(decision: Decision, config_digest: str) -> hooks_pb2.DispatchResponse:
    return hooks_pb2.DispatchResponse(
        outcome=decision.outcome.proto,
        reason=decision.reason,
        modified_prompt=decision.prompt,
        modified_arguments_json=orjson.dumps(decision.arguments) if decision.arguments is not None else b"",
        additional_context=decision.additional_context,
        handlers_run=decision.handlers_run,
        failure_class=decision.failure_class.value if decision.failure_class else "",
        decided_by=decision.decided_by,
        event_id=decision.event_id,
        config_digest=config_digest,
    )


def digest_message(config: HooksConfig) -> hooks_pb2.ConfigDigest:
    return hooks_pb2.ConfigDigest(
        digest=config.digest,
        events=[
            hooks_pb2.EventHandlers(
                event=event.proto,
                handlers=[
                    hooks_pb2.HandlerSummary(
                        id=h.id,
                        matchers=sorted(h.matcher or ()),
                        timeout_ms=h.timeout_ms,
                        fail_closed=h.fail_closed,
                    )
                    for h in handlers
                ],
            )
            for event, handlers in config.handlers.items()
        ],
    )


def run_message(stored: StoredRun) -> hooks_pb2.HookRun:
    run = stored.run
    return hooks_pb2.HookRun(
        id=str(stored.id),
        event=run.event.proto,
        handler_id=run.handler_id,
        outcome=run.outcome.proto,
        failure_class=run.failure_class.value if run.failure_class else "",
        duration_ms=run.duration_ms,
        session_id=run.session_id,
        turn_id=run.turn_id,
        tool_call_id=run.tool_call_id,
        reason=run.reason,
        created_at=run.created_at.isoformat(),
        target=run.target,
        event_id=run.event_id,
        signed=run.signed,
    )


def _session_id(value: str) -> str:
    if not value:
        raise InvalidArgument("session_id is required")
    return _id(value, "session_id")


class HooksServicer(hooks_pb2_grpc.HooksServiceServicer):
    def __init__(self, dispatcher: Dispatcher, repo: AuditRepo, writer: AuditWriter) -> None:
        self.dispatcher = dispatcher
        self.repo = repo
        self.writer = writer
        self._digest = digest_message(dispatcher.config)

    async def Dispatch(
        self, request: hooks_pb2.DispatchRequest, context: grpc.aio.ServicerContext
    ) -> hooks_pb2.DispatchResponse:
        decision = await self.dispatcher.dispatch(event_input(request))
        return decision_message(decision, self._digest.digest)

    async def GetConfigDigest(
        self, request: hooks_pb2.GetConfigDigestRequest, context: grpc.aio.ServicerContext
    ) -> hooks_pb2.ConfigDigest:
        return self._digest

    async def ListSessionRuns(
        self, request: hooks_pb2.ListSessionRunsRequest, context: grpc.aio.ServicerContext
    ) -> hooks_pb2.ListSessionRunsResponse:
        session_id = _session_id(request.session_id)
        # Read-your-writes on this replica: a dispatch that already answered is listed.
        await self.writer.flush()
        runs = await self.repo.list_session(session_id)
        return hooks_pb2.ListSessionRunsResponse(runs=[run_message(run) for run in runs])

    async def DeleteSessionRuns(
        self, request: hooks_pb2.DeleteSessionRunsRequest, context: grpc.aio.ServicerContext
    ) -> hooks_pb2.DeleteSessionRunsResponse:
        deleted = await delete_session_runs(self.repo, self.writer, _session_id(request.session_id))
        return hooks_pb2.DeleteSessionRunsResponse(deleted=deleted)
