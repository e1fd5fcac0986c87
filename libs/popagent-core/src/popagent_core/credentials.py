"""The stack's internal caller tokens: made by whoever starts the processes, checked by `auth`.

Standard library only: the launcher makes them, and it imports neither gRPC nor pydantic.
"""

from __future__ import annotations

import hashlib
import json
import secrets

from popagent_core.topology import SERVICE_NAMES


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def generate_credentials(callers: tuple[str, ...] = SERVICE_NAMES) -> tuple[dict[str, str], str]:
    """Fresh tokens for each caller (by default every service) and the JSON digest map every server is given."""
    tokens = {name: f"{name}.{secrets.token_urlsafe(32)}" for name in callers}
    digests = json.dumps({name: token_digest(token) for name, token in tokens.items()}, sort_keys=True)
    return tokens, digests
