"""Context windows of the model gateway's models, from its catalog (`GET {NINEROUTER_URL}/models`).

The same answer the gateway's catalog reads (`context_length`, or `capabilities.contextWindow`);
kept `TTL_S`, and after a failed fetch the last good answer is used (none: the window is unknown
and the context-window guard has nothing to hold the prompt to).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import httpx
import orjson

logger = logging.getLogger(__name__)

TTL_S = 300.0
RETRY_S = 10.0
TIMEOUT_S = 3.0


def _window(entry: dict[str, Any]) -> int | None:
    capabilities = entry.get("capabilities")
    for value in (
        entry.get("context_length"),
        capabilities.get("contextWindow") if isinstance(capabilities, dict) else None,
    ):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


class ContextWindows:
    def __init__(self, base_url: str, api_key: str | None, http: httpx.AsyncClient) -> None:
        self.url = base_url.rstrip("/") + "/models"
        self.api_key = api_key
        self.http = http
        self._windows: dict[str, int] = {}
        self._fetched_at: float | None = None
        self._failed_at: float | None = None
        self._lock = asyncio.Lock()

    async def window(self, model: str) -> int | None:
        now = time.monotonic()
        stale = self._fetched_at is None or now - self._fetched_at > TTL_S
        waiting = self._failed_at is not None and now - self._failed_at < RETRY_S
        if stale and not waiting:
            async with self._lock:
                if self._fetched_at is None or time.monotonic() - self._fetched_at > TTL_S:
                    await self._fetch()
        return self._windows.get(model)

    async def _fetch(self) -> None:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        try:
            response = await self.http.get(self.url, headers=headers, timeout=TIMEOUT_S)
            response.raise_for_status()
            body = orjson.loads(response.content)
            windows: dict[str, int] = {}
            for entry in body.get("data") or []:
                if isinstance(entry, dict) and isinstance(entry.get("id"), str):
                    window = _window(entry)
                    if window is not None:
                        windows[entry["id"]] = window
        except (httpx.HTTPError, orjson.JSONDecodeError, AttributeError) as exc:
            self._failed_at = time.monotonic()
            logger.warning("model catalog unavailable for context windows", extra={"error": str(exc)})
            return
        self._windows = windows
        self._fetched_at = time.monotonic()
        self._failed_at = None
