"""One lifecycle event in, one decision out (docs/hooks.md, Execution and failures).

Handlers run one after another in declaration order. A mutation becomes the next
handler's input; a deny (or a `Stop` continue) ends the chain. A `PreToolUse` ask is
recorded and the chain goes on, so a later deny still wins (deny > ask > allow); the
decision is ask when no handler denied and one asked. Transport, timeout,
malformed-response and event-outcome failures all follow the handler's failure mode:
open counts as a pass, closed ends the chain with a deny (`continue` for `Stop`).
Every handler that ran leaves one audit record; none of them holds a payload.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson
from opentelemetry import trace

from popagent_core.redaction import redact_tool_detail
from popagent_core.telemetry import TRACER
from popagent_hooks.audit import HookRun
from popagent_hooks.config import HandlerConfig, HooksConfig
from popagent_hooks.transport import HookFailure, HookTransport, sign
from popagent_hooks_client.events import Event, FailureClass, MatcherKind, Outcome, Replacement, closed_outcome

SCHEMA_VERSION = 1
MAX_CONTEXT_BYTES = 16 * 1024
MAX_REASON_BYTES = 2 * 1024
CONTEXT_SEPARATOR = "\n"
_ANSWER_KEYS = frozenset({"schemaVersion", "outcome", "reason", "replacement", "additionalContext"})
# Where a replacement lands in the next handler's `detail`.
_REPLACEMENT_KEY = {Replacement.PROMPT: "prompt", Replacement.ARGUMENTS: "arguments"}
# Where the matched key is shown to handlers.
_TARGET_KEY = {MatcherKind.TOOL: "toolName", MatcherKind.SPECIALIST: "agentId"}


@dataclass(frozen=True)
class EventInput:
    event: Event
    session_id: str = ""
    turn_id: str = ""
    tool_call_id: str = ""
    model: str = ""
    target: str = ""
    detail: dict[str, Any] = field(default_factory=dict)
    event_id: str = ""


@dataclass
class Decision:
    outcome: Outcome
    event_id: str
    reason: str = ""
    prompt: str | None = None
    arguments: dict[str, Any] | None = None
    additional_context: str = ""
    failure_class: FailureClass | None = None
    decided_by: str = ""
    runs: list[HookRun] = field(default_factory=list)

    @property
    def handlers_run(self) -> int:
        return len(self.runs)


@dataclass(frozen=True)
class HandlerAnswer:
    outcome: Outcome
    reason: str
    replacement: str | dict[str, Any] | None
    context: str


def bound_utf8(text: str, limit: int = MAX_REASON_BYTES) -> str:
    """`text` cut to at most `limit` UTF-8 bytes on a character boundary."""
    encoded = text.encode()
    if len(encoded) <= limit:
        return text
    return encoded[:limit].decode("utf-8", errors="ignore")


def _strict_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise ValueError("duplicate key")
    return result


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _malformed(message: str) -> HookFailure:
    return HookFailure(FailureClass.MALFORMED_RESPONSE, message)


def _wrong_outcome(message: str) -> HookFailure:
    return HookFailure(FailureClass.EVENT_OUTCOME, message)


def parse_answer(raw: bytes, event: Event) -> HandlerAnswer:
    """Check one handler response against the strict response schema and the event's rules."""
    try:
        document = json.loads(raw.decode("utf-8"), object_pairs_hook=_strict_object, parse_constant=_refuse_constant)
    except UnicodeDecodeError:
        raise _malformed("response is not UTF-8") from None
    except ValueError as exc:
        raise _malformed(f"response is not strict JSON ({str(exc)[:200]})") from None
    if not isinstance(document, dict):
        raise _malformed("response must be a JSON object")
    unknown = sorted(set(document) - _ANSWER_KEYS)
    if unknown:
        raise _malformed(f"unknown response keys: {', '.join(unknown)[:200]}")
    version = document.get("schemaVersion")
    if type(version) is not int or version != SCHEMA_VERSION:
        raise _malformed(f"schemaVersion must be {SCHEMA_VERSION}")
    try:
        outcome = Outcome(document.get("outcome"))
    except ValueError:
        raise _malformed(f"outcome must be one of {', '.join(o.value for o in Outcome)}") from None
    reason = document.get("reason", "")
    if not isinstance(reason, str):
        raise _malformed("reason must be a string")
    if len(reason.encode()) > MAX_REASON_BYTES:
        raise _malformed(f"reason exceeds {MAX_REASON_BYTES} bytes")
    context = document.get("additionalContext", "")
    if not isinstance(context, str):
        raise _malformed("additionalContext must be a string")
    if len(context.encode()) > MAX_CONTEXT_BYTES:
        raise _malformed(f"additionalContext exceeds {MAX_CONTEXT_BYTES} bytes")

    rules = event.rules
    if outcome not in rules.allowed:
        raise _wrong_outcome(f"outcome {outcome.value} is not allowed for {event.value}")
    if context and not rules.accepts_context:
        raise _wrong_outcome(f"{event.value} does not accept additionalContext")
    replacement = document.get("replacement")
    if outcome is Outcome.MODIFY:
        if rules.replacement is Replacement.PROMPT and not isinstance(replacement, str):
            raise _wrong_outcome(f"{event.value} replacement must be a string")
        if rules.replacement is Replacement.ARGUMENTS and not isinstance(replacement, dict):
            raise _wrong_outcome(f"{event.value} replacement must be an argument object")
    elif "replacement" in document:
        raise _wrong_outcome("replacement is only accepted with outcome modify")
    return HandlerAnswer(outcome, reason, replacement, context)


def _now() -> datetime:
    return datetime.now(UTC)


class Dispatcher:
    def __init__(
        self,
        config: HooksConfig,
        transport: HookTransport,
        audit: Callable[[list[HookRun]], None] | None = None,
    ) -> None:
        self.config = config
        self.transport = transport
        self.audit = audit

    async def dispatch(self, request: EventInput) -> Decision:
        event_id = request.event_id or str(uuid.uuid4())
        decision = Decision(Outcome.PASS, event_id)
        handlers = self.config.matching(request.event, request.target)
        if not handlers:
            return decision
        try:
            await self._run_chain(request, handlers, decision)
        finally:
            # Also when the caller gave up mid-chain: the handlers that ran are audited.
            if self.audit is not None:
                self.audit(decision.runs)
        return decision

    async def _run_chain(self, request: EventInput, handlers: list[HandlerConfig], decision: Decision) -> None:
        event, event_id = request.event, decision.event_id
        detail = self._initial_detail(request)
        replacement_key = _REPLACEMENT_KEY.get(event.rules.replacement)
        contexts: list[str] = []
        context_bytes = 0
        modified = False
        # The first handler that answered ask (PreToolUse only); a later deny still wins.
        asked: tuple[str, str] | None = None
        for handler in handlers:
            # One span per handler run: event, handler and outcome (never the payload or the reason).
            with TRACER.start_as_current_span(
                "hook.dispatch",
                attributes={"popagent.hook.event": event.value, "popagent.hook.handler_id": handler.id},
            ):
                started_at, started = _now(), time.monotonic()
                try:
                    answer = await self._call(handler, request, event_id, detail)
                    combined_bytes = context_bytes
                    if answer.context:
                        combined_bytes += len(answer.context.encode()) + (len(CONTEXT_SEPARATOR) if contexts else 0)
                        if combined_bytes > MAX_CONTEXT_BYTES:
                            raise _malformed(f"combined additionalContext exceeds {MAX_CONTEXT_BYTES} bytes")
                except HookFailure as failure:
                    outcome = closed_outcome(event) if handler.fail_closed else Outcome.PASS
                    message = bound_utf8(f"hook {handler.id} failed ({failure.failure_class.value}): {failure}")
                    decision.runs.append(
                        self._record(
                            request, event_id, handler, outcome, failure.failure_class, message, started_at, started
                        )
                    )
                    if handler.fail_closed:
                        decision.outcome, decision.reason = outcome, message
                        decision.failure_class, decision.decided_by = failure.failure_class, handler.id
                        break
                    continue

                decision.runs.append(
                    self._record(request, event_id, handler, answer.outcome, None, answer.reason, started_at, started)
                )
                if answer.context:
                    context_bytes = combined_bytes
                    contexts.append(answer.context)
                if answer.outcome is Outcome.MODIFY and replacement_key is not None:
                    detail = {**detail, replacement_key: answer.replacement}
                    modified = True
                elif answer.outcome is Outcome.ASK:
                    if asked is None:
                        asked = (handler.id, answer.reason or f"hook {handler.id} answered ask")
                elif answer.outcome in (Outcome.DENY, Outcome.CONTINUE):
                    decision.outcome, decision.decided_by = answer.outcome, handler.id
                    decision.reason = answer.reason or f"hook {handler.id} answered {answer.outcome.value}"
                    break

        decision.additional_context = CONTEXT_SEPARATOR.join(contexts)
        if decision.outcome is not Outcome.PASS:
            return
        if asked is not None:
            # The person asked approves the arguments that will run, so a modification travels along.
            decision.outcome = Outcome.ASK
            decision.decided_by, decision.reason = asked
        elif modified:
            decision.outcome = Outcome.MODIFY
        if modified:
            if event.rules.replacement is Replacement.PROMPT:
                decision.prompt = detail["prompt"]
            else:
                decision.arguments = detail["arguments"]

    @staticmethod
    def _initial_detail(request: EventInput) -> dict[str, Any]:
        detail = dict(request.detail)
        kind = request.event.rules.matcher
        if kind in _TARGET_KEY:
            detail[_TARGET_KEY[kind]] = request.target
        if kind is MatcherKind.TOOL:
            detail = redact_tool_detail(request.target, detail)
        return detail

    async def _call(
        self, handler: HandlerConfig, request: EventInput, event_id: str, detail: dict[str, Any]
    ) -> HandlerAnswer:
        timestamp = time.time()
        body = orjson.dumps(
            {
                "schemaVersion": SCHEMA_VERSION,
                "event": request.event.value,
                "eventId": event_id,
                "handlerId": handler.id,
                "sessionId": request.session_id or None,
                "turnId": request.turn_id or None,
                "toolCallId": request.tool_call_id or None,
                "model": request.model or None,
                "timestamp": datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="milliseconds"),
                "detail": detail,
            }
        )
        message_id = f"{event_id}.{handler.id}"
        seconds = int(timestamp)
        headers = [(b"webhook-id", message_id.encode()), (b"webhook-timestamp", str(seconds).encode())]
        if handler.secret is not None:
            headers.append((b"webhook-signature", sign(handler.secret, message_id, seconds, body).encode()))
        raw = await self.transport.post(handler.url, body, headers, handler.timeout_ms / 1000)
        return parse_answer(raw, request.event)

    @staticmethod
    def _record(
        request: EventInput,
        event_id: str,
        handler: HandlerConfig,
        outcome: Outcome,
        failure_class: FailureClass | None,
        reason: str,
        started_at: datetime,
        started: float,
    ) -> HookRun:
        span = trace.get_current_span()
        span.set_attribute("popagent.hook.outcome", outcome.value)
        if failure_class is not None:
            span.set_attribute("error.type", failure_class.value)
        return HookRun(
            event=request.event,
            handler_id=handler.id,
            outcome=outcome,
            failure_class=failure_class,
            duration_ms=round((time.monotonic() - started) * 1000),
            session_id=request.session_id,
            turn_id=request.turn_id,
            tool_call_id=request.tool_call_id,
            target=request.target,
            event_id=event_id,
            reason=bound_utf8(reason),
            created_at=started_at,
            signed=handler.signed,
        )
