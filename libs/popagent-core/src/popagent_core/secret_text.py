"""Secrets in free text: redact what looks like a credential, or tell that text carries one.

Evidence that leaves a turn (the outcome event, evolution's signals) is redacted with
`redact_secrets`. What learning would write into an agent's prompt or skills is refused
outright when `carries_secret` finds anything credential-like in it, redacted or not:
a learned change is never allowed to quote a secret, and a long random-looking token
(a key, a password, the test suite's canary) is treated as one.
"""

from __future__ import annotations

import math
import re
from collections import Counter

REDACTED = "[redacted]"

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
# A run of 32+ characters from a key alphabet, with digits and letters mixed and near-uniform
# characters: what random keys, tokens and generated passwords look like (hex digests
# included: fail closed). '/' is left out so file paths are not taken for keys.
_RANDOM_TOKEN = re.compile(r"[A-Za-z0-9+_=-]{32,}")
MIN_ENTROPY_BITS = 3.0


def redact_secrets(text: str) -> str:
    """`text` with anything that looks like a credential replaced by `[redacted]`."""
    for pattern in _SECRETS:
        text = pattern.sub(REDACTED, text)
    return _SECRET_ASSIGNMENT.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)


def _random_looking(token: str) -> bool:
    digits = sum(c.isdigit() for c in token)
    letters = sum(c.isalpha() for c in token)
    if digits < 2 or letters < 4:
        return False
    counts = Counter(token)
    entropy = -sum(n / len(token) * math.log2(n / len(token)) for n in counts.values())
    return entropy >= MIN_ENTROPY_BITS


def carries_secret(text: str) -> bool:
    """True when `text` holds anything credential-like: a known key format, a secret
    assignment, or a long random-looking token."""
    if any(pattern.search(text) for pattern in _SECRETS):
        return True
    if any(m.group(3) != REDACTED for m in _SECRET_ASSIGNMENT.finditer(text)):
        return True
    return any(_random_looking(m.group(0)) for m in _RANDOM_TOKEN.finditer(text))
