"""Turn and task outcomes (popagent.agent_runner.turn.completed) in, signals out.

Chat turns and task turns run through the same turn runner and publish the same event,
so one durable JetStream consumer sees both; a turn publishes one event per agent run (the
supervisor's and each delegation's). Every outcome is counted for its agent (the rate a
reflection reads); only failures of a class the agent's own behaviour can change become
signals, since a provider outage or a shutdown teaches nothing.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable

from google.protobuf.message import DecodeError
from nats.aio.msg import Msg

from popagent.events.v1 import events_pb2
from popagent_core.secret_text import redact_secrets
from popagent_evolution.signals import NewSignal, Outcome, SignalRepo

logger = logging.getLogger(__name__)

DURABLE = "evolution-signals"
GOAL_CHARS = 500
EVIDENCE_CHARS = 2000
# Failure classes (popagent_agent_runner.failures.TurnFailure values) learning can act on:
# the agent ran out of room or time, produced something the model gateway or a hook
# refused, or could not finish past the Stop hook.
LEARNABLE = frozenset({"context_window", "rejected", "hook_denied", "stop_blocked", "deadline"})
_TRACE = re.compile(r"^[0-9a-f]{32}$")
_AGENT = re.compile(r"^[a-z][a-z0-9-]{0,62}$")


def bounded(text: str, limit: int) -> str:
    text = redact_secrets(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def signal_from(event_id: str, event: events_pb2.TurnCompleted) -> NewSignal | None:
    """The signal an outcome event carries, or None (a success, a class nothing can learn from, bad ids)."""
    if event.kind != "failure" or event.failure_class not in LEARNABLE:
        return None
    if not _TRACE.match(event.trace_id) or not _AGENT.match(event.agent_id) or not event.turn_id:
        logger.warning("outcome event without usable ids", extra={"event_id": event_id})
        return None
    return NewSignal(
        event_id=event_id,
        trace_id=event.trace_id,
        turn_id=event.turn_id[:128],
        session_id=event.session_id[:128],
        agent_id=event.agent_id,
        failure_class=event.failure_class,
        goal=bounded(event.goal, GOAL_CHARS),
        evidence=bounded(event.evidence, EVIDENCE_CHARS),
    )


def outcome_from(event_id: str, event: events_pb2.TurnCompleted) -> Outcome | None:
    """The outcome an event reports, or None (an agent id no agent can have)."""
    if not _AGENT.match(event.agent_id):
        return None
    return Outcome(event_id=event_id, agent_id=event.agent_id, succeeded=event.kind == "outcome")


def _event_of(msg: Msg) -> tuple[str, events_pb2.TurnCompleted] | None:
    try:
        event = events_pb2.TurnCompleted.FromString(msg.data)
    except DecodeError:
        logger.warning("outcome event that is no TurnCompleted dropped", extra={"subject": msg.subject})
        return None
    event_id = (msg.headers or {}).get("Nats-Msg-Id", "") or f"seq-{msg.metadata.sequence.stream}"
    return event_id[:128], event


def outcome_handler(repo: SignalRepo, *, max_attempts: int, delay_s: float) -> Callable[[list[Msg]], Awaitable[None]]:
    """The batch handler of the outcome consumer: every fetched event's outcome, then its signal, in one insert each."""

    async def handle(messages: list[Msg]) -> None:
        events = [decoded for decoded in map(_event_of, messages) if decoded is not None]
        await repo.record_outcomes([o for o in (outcome_from(*e) for e in events) if o is not None])
        found = [signal for signal in (signal_from(*e) for e in events) if signal is not None]
        stored = await repo.ingest_many(found, max_attempts=max_attempts, delay_s=delay_s)
        if stored:
            logger.info("signals recorded", extra={"signals": stored, "events": len(messages)})

    return handle
