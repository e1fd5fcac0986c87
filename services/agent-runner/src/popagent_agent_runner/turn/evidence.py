"""The evolution evidence a turn publishes: bounded, with anything that looks like a credential redacted."""

from __future__ import annotations

import re

from popagent_agent_runner.turn.hooks_points import bounded

# Bounds of the evolution evidence published with every turn.
GOAL_CHARS = 500
EVIDENCE_CHARS = 2000

_SECRETS = (
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.DOTALL),
    re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_-]{16,}"),
    re.compile(r"\bwhsec_[A-Za-z0-9+/=]{16,}"),
    re.compile(r"\b(?:ghp|gho|ghs|ghu|github_pat)_[A-Za-z0-9_]{20,}"),
    re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}"),
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),
    re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{16,}"),
)
_SECRET_ASSIGNMENT = re.compile(r"(?i)\b(password|passwd|secret|token|api[_-]?key)(\s*[:=]\s*)(\S+)")


def redact_secrets(text: str) -> str:
    """Evidence text with anything that looks like a credential replaced by `[redacted]`."""
    for pattern in _SECRETS:
        text = pattern.sub("[redacted]", text)
    return _SECRET_ASSIGNMENT.sub(lambda m: f"{m.group(1)}{m.group(2)}[redacted]", text)


def evidence(text: str, limit: int) -> str:
    return bounded(redact_secrets(text), limit)
