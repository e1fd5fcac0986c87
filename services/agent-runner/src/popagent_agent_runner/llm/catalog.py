"""The model gateway's catalog (`GET {NINEROUTER_URL}/models`) as this process reads it: once per
`TTL_S` for everyone who needs it (the models' prices, `llm.prices`; their context windows,
`turn.observational.windows`), instead of one fetch each.

After a failed fetch the last good answer stays in use and the catalog is asked again only after
`RETRY_S`. `entries()` waits for a fetch when the answer is stale (the context-window guard needs
the window before its request); `cached()` never waits and starts the refresh in the background
(what a model call's pricing does).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import httpx

from popagent_core.model_catalog import catalog_entries

logger = logging.getLogger(__name__)

TTL_S = 300.0
RETRY_S = 10.0
TIMEOUT_S = 3.0


class ModelCatalog:
    def __init__(self, base_url: str, client: httpx.AsyncClient, *, api_key: str | None = None) -> None:
        self.url = base_url.rstrip("/") + "/models"
        self._client = client
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        # The `data` entries of the last good answer (None: none yet), and a count of the answers
        # taken, so readers re-derive what they keep only when it changed.
        self._entries: list[dict[str, Any]] | None = None
        self.version = 0
        self._fetched_at: float | None = None
        self._failed_at: float | None = None
        self._fetching: asyncio.Task[None] | None = None

    def _due(self) -> bool:
        now = time.monotonic()
        stale = self._fetched_at is None or now - self._fetched_at > TTL_S
        waiting = self._failed_at is not None and now - self._failed_at < RETRY_S
        return stale and not waiting

    def _fetch_once(self) -> asyncio.Task[None]:
        if self._fetching is None or self._fetching.done():
            self._fetching = asyncio.get_running_loop().create_task(self._fetch(), name="model-catalog")
        return self._fetching

    async def entries(self) -> list[dict[str, Any]] | None:
        """The catalog's entries, fetched first when the copy is stale (one fetch for every waiter)."""
        if self._due():
            await asyncio.shield(self._fetch_once())
        return self._entries

    def cached(self) -> list[dict[str, Any]] | None:
        """The entries as last fetched; a stale copy starts a refresh for the next readers."""
        if self._due():
            self._fetch_once()
        return self._entries

    def refresh_soon(self) -> None:
        self._fetch_once()

    async def _fetch(self) -> None:
        try:
            response = await self._client.get(self.url, headers=self._headers, timeout=TIMEOUT_S)
            response.raise_for_status()
            entries = catalog_entries(response.content)
        except (httpx.HTTPError, ValueError) as exc:
            self._failed_at = time.monotonic()
            logger.warning("model catalog not fetched", extra={"error": f"{type(exc).__name__}: {str(exc)[:200]}"})
            return
        self._entries = entries
        self.version += 1
        self._fetched_at = time.monotonic()
        self._failed_at = None

    async def aclose(self) -> None:
        if self._fetching is not None and not self._fetching.done():
            self._fetching.cancel()
