"""The evolution evidence a turn publishes: bounded, with anything that looks like a credential redacted."""

from __future__ import annotations

from popagent_agent_runner.context.hooks import bounded
from popagent_core.secret_text import redact_secrets

# Bounds of the evolution evidence published with every turn.
GOAL_CHARS = 500
EVIDENCE_CHARS = 2000

__all__ = ["EVIDENCE_CHARS", "GOAL_CHARS", "evidence", "redact_secrets"]


def evidence(text: str, limit: int) -> str:
    # Only twice the bound is screened (a long answer costs no more than a short one): a
    # credential cut in two there lies past `limit` once the text before it is redacted.
    return bounded(redact_secrets(text[: 2 * limit]), limit)
