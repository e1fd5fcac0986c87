"""Caller side of the hooks service, for agent-runner and tasks.

    client = HooksClient(hooks_pb2_grpc.HooksServiceStub(channel))
    decision = await client.dispatch(Event.PRE_TOOL_USE, session_id=..., turn_id=...,
                                     tool_call_id=..., target="webSearch", detail={"arguments": args})

The client caches the service's configuration digest, so an event with no matching
handler returns an immediate pass without any RPC. `dispatch` never raises a service
error: this client is the one place the fail-closed rule lives, so no caller re-applies it.

- The service cannot be reached (unavailable, deadline): the matched handlers' failure
  modes still apply: a fail-closed handler (or, before the digest was ever fetched, any
  gate event) gets the closed outcome, everything else passes.
- The service answered the dispatch with any other error (it refused the request or
  failed itself): the handlers never ran and the caller cannot tell which would have,
  so a gate event gets the closed outcome and an observational one passes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from popagent.hooks.v1 import hooks_pb2, hooks_pb2_grpc
from popagent_core.errors import DeadlineExceeded, PopagentError, Unavailable
from popagent_core.grpc_client import map_rpc_errors
from popagent_hooks_client.events import Event, FailureClass, Outcome, closed_outcome, matcher_applies

logger = logging.getLogger(__name__)

DIGEST_TTL_S = 30.0
# Beyond the sum of the matched handlers' own deadlines: the service's own work and the hop.
RPC_MARGIN_S = 1.0
# Used only when the digest is unknown (the service was never reached).
FALLBACK_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class HookDecision:
    outcome: Outcome
    # Why a deny, continue or ask happened; for ask, the first asking handler's reason.
    reason: str = ""
    # Replacement prompt (UserPromptSubmit, SubagentStart) when outcome is modify.
    prompt: str | None = None
    # Replacement tool arguments (PreToolUse) when outcome is modify, or ask after a handler
    # modified them: what the person asked approves and what then runs. None when unchanged.
    arguments: dict[str, Any] | None = None
    additional_context: str = ""
    handlers_run: int = 0
    # A `FailureClass` value, set when a fail-closed failure decided the outcome.
    failure_class: str = ""
    # The handler that denied/continued (or failed closed), or, for ask, the first one that asked.
    decided_by: str = ""
    event_id: str = ""


@dataclass(frozen=True)
class HandlerSummary:
    id: str
    matchers: frozenset[str]
    timeout_ms: int
    fail_closed: bool

    def matches(self, target: str) -> bool:
        return matcher_applies(self.matchers, target)


@dataclass(frozen=True)
class _Digest:
    digest: str
    handlers: dict[Event, tuple[HandlerSummary, ...]]
    fetched_at: float


def _digest_from(message: hooks_pb2.ConfigDigest, now: float) -> _Digest:
    handlers: dict[Event, tuple[HandlerSummary, ...]] = {}
    for entry in message.events:
        try:
            event = Event.from_proto(entry.event)
        except ValueError:
            continue
        handlers[event] = tuple(
            HandlerSummary(h.id, frozenset(h.matchers), h.timeout_ms, h.fail_closed) for h in entry.handlers
        )
    return _Digest(message.digest, handlers, now)


def _transport_failure(event: Event, closed: bool, reason: str, event_id: str) -> HookDecision:
    """The decision when the hooks service could not decide: the event's closed outcome when it fails
    closed, else a pass."""
    if not closed:
        return HookDecision(Outcome.PASS, event_id=event_id)
    return HookDecision(closed_outcome(event), reason=reason, failure_class=FailureClass.TRANSPORT, event_id=event_id)


def _decision_from(response: hooks_pb2.DispatchResponse) -> HookDecision:
    return HookDecision(
        outcome=Outcome.from_proto(response.outcome),
        reason=response.reason,
        prompt=response.modified_prompt if response.HasField("modified_prompt") else None,
        arguments=orjson.loads(response.modified_arguments_json) if response.modified_arguments_json else None,
        additional_context=response.additional_context,
        handlers_run=response.handlers_run,
        failure_class=response.failure_class,
        decided_by=response.decided_by,
        event_id=response.event_id,
    )


class HooksClient:
    def __init__(
        self,
        stub: hooks_pb2_grpc.HooksServiceStub,
        *,
        digest_ttl_s: float = DIGEST_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stub = stub
        self.digest_ttl_s = digest_ttl_s
        self.clock = clock
        self._digest: _Digest | None = None
        self._refresh_lock = asyncio.Lock()

    def invalidate(self) -> None:
        """Forget the cached digest (e.g. on a hooks config-loaded fact); the next call refetches."""
        self._digest = None

    async def matching(self, event: Event, target: str = "") -> tuple[HandlerSummary, ...] | None:
        """Handlers that would run for `event` and `target`; None when the service was never reached."""
        digest = await self._current_digest()
        if digest is None:
            return None
        return tuple(h for h in digest.handlers.get(event, ()) if h.matches(target))

    async def dispatch(
        self,
        event: Event,
        *,
        session_id: str = "",
        turn_id: str = "",
        tool_call_id: str = "",
        model: str = "",
        target: str = "",
        detail: Mapping[str, Any] | None = None,
        event_id: str = "",
    ) -> HookDecision:
        event = Event(event)
        try:
            handlers = await self.matching(event, target)
        except PopagentError as exc:
            return self._refused(event, exc, event_id)
        if handlers is not None and not handlers:
            return HookDecision(Outcome.PASS, event_id=event_id)
        timeout_s = (
            sum(h.timeout_ms for h in handlers) / 1000 + RPC_MARGIN_S if handlers is not None else FALLBACK_TIMEOUT_S
        )
        request = hooks_pb2.DispatchRequest(
            event=event.proto,
            session_id=session_id,
            turn_id=turn_id,
            tool_call_id=tool_call_id,
            model=model,
            target=target,
            detail_json=orjson.dumps(dict(detail)) if detail else b"",
            event_id=event_id,
        )
        try:
            with map_rpc_errors():
                response = await self.stub.Dispatch(request, timeout=timeout_s)
        except (Unavailable, DeadlineExceeded) as exc:
            return self._unreachable(event, handlers, exc, event_id)
        except PopagentError as exc:
            return self._refused(event, exc, event_id)
        if self._digest is not None and response.config_digest != self._digest.digest:
            self.invalidate()
        return _decision_from(response)

    def _unreachable(
        self, event: Event, handlers: tuple[HandlerSummary, ...] | None, exc: Exception, event_id: str
    ) -> HookDecision:
        closed = event.rules.gate and (handlers is None or any(h.fail_closed for h in handlers))
        logger.warning(
            "hooks service unreachable", extra={"event": event.value, "fail_closed": closed, "error": str(exc)}
        )
        return _transport_failure(event, closed, f"hooks service unreachable ({type(exc).__name__})", event_id)

    @staticmethod
    def _refused(event: Event, exc: PopagentError, event_id: str) -> HookDecision:
        closed = event.rules.gate
        logger.warning("hook dispatch failed", extra={"event": event.value, "fail_closed": closed, "error": str(exc)})
        return _transport_failure(event, closed, f"hook dispatch failed: {exc}", event_id)

    async def _current_digest(self) -> _Digest | None:
        digest = self._digest
        if digest is not None and self.clock() - digest.fetched_at < self.digest_ttl_s:
            return digest
        async with self._refresh_lock:
            if self._digest is not None and self._digest is not digest:
                return self._digest
            try:
                with map_rpc_errors():
                    message = await self.stub.GetConfigDigest(hooks_pb2.GetConfigDigestRequest(), timeout=2.0)
            except (Unavailable, DeadlineExceeded) as exc:
                # A stale digest still knows which handlers exist and how they fail.
                logger.warning(
                    "hooks config digest unavailable", extra={"error": str(exc), "stale": digest is not None}
                )
                return digest
            self._digest = _digest_from(message, self.clock())
            return self._digest
