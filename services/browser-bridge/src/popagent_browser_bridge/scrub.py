"""Secret hygiene: every value bound in secrets is removed from every MCP result.

A real browser server leaks what it is given: `@playwright/mcp` echoes typed text and evaluate
sources in "Ran Playwright code", and every snapshot prints password field values. So before a
result goes anywhere (the model, hooks, logs, the UI, the database) each bound value is replaced
in its raw form, base64 (standard and URL-safe, at every byte alignment, so it is found inside a
larger base64 blob too), hex (either case) and URL-encoding (`quote` and `quote_plus`, escapes in
either case).

The values come from the secrets service, which resolves plaintext for browser-bridge alone:
the cache is reloaded when a `popagent.secrets.secret.changed` fact arrives and at least every
`max_age_s`; when it cannot be loaded, browser results are refused rather than passed unscrubbed.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import re
import time
from urllib.parse import quote, quote_plus

import grpc

from popagent.secrets.v1 import secrets_pb2, secrets_pb2_grpc
from popagent_core.errors import Unavailable

logger = logging.getLogger(__name__)

REDACTED = "[redacted]"
# Base64 fragments shorter than this would redact ordinary text; a value that short is still
# caught raw, in hex and URL-encoded.
MIN_BASE64_CORE = 12


def _base64_cores(raw: bytes) -> list[str]:
    """Fragments present whenever `raw` is base64-encoded inside anything (all 3 alignments)."""
    cores: list[str] = []
    for offset in range(3):
        encoded = base64.b64encode(b"\x00" * offset + raw)
        start = 4 if offset else 0
        core = encoded[start : ((offset + len(raw)) // 3) * 4].decode()
        if len(core) >= MIN_BASE64_CORE:
            cores.append(core)
            cores.append(core.translate(str.maketrans("+/", "-_")))
    return cores


def forms(value: str) -> list[tuple[str, bool]]:
    """(pattern, case-insensitive) for every form of `value` the scrubber removes."""
    raw = value.encode()
    found: list[tuple[str, bool]] = [(value, False)]
    found += [(core, False) for core in _base64_cores(raw)]
    found.append((raw.hex(), True))
    for encoded in (quote(value, safe=""), quote_plus(value, safe="")):
        if encoded != value:
            found.append((encoded, True))
    return found


class Scrubber:
    """One compiled pattern of every form of every value."""

    def __init__(self, values: frozenset[str] = frozenset()) -> None:
        self.values = values
        patterns = sorted({(p, ci) for value in values if value for p, ci in forms(value)}, key=lambda f: -len(f[0]))
        parts = [f"(?i:{re.escape(p)})" if ci else re.escape(p) for p, ci in patterns]
        self._pattern = re.compile("|".join(parts)) if parts else None
        # Substring checks first (C speed): the regex runs only on text that holds a form.
        self._exact = tuple(p for p, ci in patterns if not ci)
        self._folded = tuple(p.lower() for p, ci in patterns if ci)

    def _holds(self, text: str) -> bool:
        if any(p in text for p in self._exact):
            return True
        if self._folded:
            lowered = text.lower()
            return any(p in lowered for p in self._folded)
        return False

    def scrub(self, text: str) -> str:
        if self._pattern is None or not text or not self._holds(text):
            return text
        return self._pattern.sub(REDACTED, text)

    def contains_secret(self, text: str) -> bool:
        """Whether `text` is, or holds, a bound value (any form)."""
        return self._pattern is not None and self._holds(text)


class SecretValues:
    """The bound values, from the secrets service, kept fresh."""

    def __init__(self, stub: secrets_pb2_grpc.SecretsServiceStub | None, *, max_age_s: float = 30.0) -> None:
        self.stub = stub
        self.max_age_s = max_age_s
        self._scrubber = Scrubber()
        self._loaded_at: float | None = None
        self._stale = True
        self._lock = asyncio.Lock()

    def changed(self) -> None:
        self._stale = True

    async def scrubber(self) -> Scrubber:
        if self.stub is None:
            return self._scrubber
        fresh = self._loaded_at is not None and time.monotonic() - self._loaded_at < self.max_age_s
        if fresh and not self._stale:
            return self._scrubber
        async with self._lock:
            if self._stale or self._loaded_at is None or time.monotonic() - self._loaded_at >= self.max_age_s:
                self._stale = False
                try:
                    self._scrubber = Scrubber(await self._load())
                except grpc.aio.AioRpcError as exc:
                    self._stale = True
                    raise Unavailable(
                        f"browser results cannot be checked for secrets: secrets service answered {exc.code().name}"
                    ) from None
                self._loaded_at = time.monotonic()
        return self._scrubber

    async def _load(self) -> frozenset[str]:
        assert self.stub is not None
        listed = await self.stub.ListSecrets(secrets_pb2.ListSecretsRequest(), timeout=5)
        values: set[str] = set()
        for secret in listed.secrets:
            if not secret.origins:
                continue
            resolved = await self.stub.ResolveSecret(
                secrets_pb2.ResolveSecretRequest(
                    resource_id=secret.resource_id, name=secret.name, origin=secret.origins[0]
                ),
                timeout=5,
            )
            values.add(resolved.value)
        return frozenset(values)

    async def resolve(self, resource_id: str, name: str) -> tuple[list[str], dict[str, str]]:
        """The origins `name` is bound to and its value for each (the one plaintext path)."""
        if self.stub is None:
            raise Unavailable("secrets are not configured for the browser bridge")
        listed = await self.stub.ListSecrets(secrets_pb2.ListSecretsRequest(resource_id=resource_id), timeout=5)
        for secret in listed.secrets:
            if secret.name == name:
                origins = list(secret.origins)
                values = {}
                for origin in origins:
                    resolved = await self.stub.ResolveSecret(
                        secrets_pb2.ResolveSecretRequest(resource_id=resource_id, name=name, origin=origin), timeout=5
                    )
                    values[origin] = resolved.value
                return origins, values
        return [], {}
