"""The evolution evidence a turn publishes: bounded, with anything that looks like a credential redacted."""

from __future__ import annotations

from typing import Literal

from popagent.events.v1 import events_pb2
from popagent_agent_runner.context.deps import TurnContext
from popagent_agent_runner.context.hooks import bounded
from popagent_core.secret_text import redact_secrets

# Bounds of the evolution evidence published with every turn.
GOAL_CHARS = 500
EVIDENCE_CHARS = 2000

__all__ = ["EVIDENCE_CHARS", "GOAL_CHARS", "evidence", "outcome_event", "redact_secrets"]


def evidence(text: str, limit: int) -> str:
    # Only twice the bound is screened (a long answer costs no more than a short one): a
    # credential cut in two there lies past `limit` once the text before it is redacted.
    return bounded(redact_secrets(text[: 2 * limit]), limit)


def outcome_event(
    turn: TurnContext,
    *,
    agent_id: str,
    kind: Literal["outcome", "failure"],
    goal: str,
    text: str,
    failure_class: str = "",
) -> events_pb2.TurnCompleted:
    """The outcome of one agent run of `turn` (the supervisor's, or a specialist's delegation) for evolution."""
    return events_pb2.TurnCompleted(
        turn_id=turn.turn_id,
        trace_id=turn.trace_id,
        session_id=turn.session_id,
        agent_id=agent_id,
        kind=kind,
        goal=evidence(goal, GOAL_CHARS),
        evidence=evidence(text, EVIDENCE_CHARS),
        failure_class=failure_class,
    )
