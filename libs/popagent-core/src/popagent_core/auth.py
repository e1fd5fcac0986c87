"""Internal caller authentication between services.

Each process holds one token of the form `<caller>.<random>` (POPAGENT_INTERNAL_TOKEN)
and each server knows only the SHA-256 of every caller's token
(POPAGENT_INTERNAL_CALLERS, JSON). A server can therefore tell callers apart but can
never impersonate one: the secrets service knows browser-bridge by a credential that
only browser-bridge holds.
"""

from __future__ import annotations

import contextvars
import hmac
import json

from popagent_core.credentials import token_digest
from popagent_core.errors import ConfigurationError, Unauthenticated

caller_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("caller", default=None)


class CallerRegistry:
    """Who may call: caller name -> token digest."""

    def __init__(self, digests: dict[str, str]) -> None:
        self._digests = digests

    @classmethod
    def from_json(cls, raw: str) -> CallerRegistry:
        if not raw.strip():
            raise ConfigurationError("POPAGENT_INTERNAL_CALLERS is required (JSON of caller -> token sha256)")
        try:
            parsed = json.loads(raw)
        except ValueError as exc:
            raise ConfigurationError("POPAGENT_INTERNAL_CALLERS is not valid JSON") from exc
        if not isinstance(parsed, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and len(v) == 64 for k, v in parsed.items()
        ):
            raise ConfigurationError("POPAGENT_INTERNAL_CALLERS must map caller names to sha256 hex digests")
        return cls(parsed)

    def authenticate(self, token: str | None) -> str:
        """The caller's name, or Unauthenticated. Constant-time digest comparison."""
        if not token or "." not in token:
            raise Unauthenticated("missing or malformed internal credential")
        caller = token.split(".", 1)[0]
        expected = self._digests.get(caller, "0" * 64)
        if not hmac.compare_digest(expected, token_digest(token)) or caller not in self._digests:
            raise Unauthenticated("unknown internal credential")
        return caller
