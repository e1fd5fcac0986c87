"""The model catalog: model ids and context windows of the model gateway, cached in the gateway.

`GET {NINEROUTER_URL}/models` on an OpenAI-compatible server (9Router answers
`{"data": [{"id", "context_length", "capabilities": {"contextWindow"}}]}`; other
gateways may report neither window). A fresh answer is kept for `ttl_s`; when a
refresh fails the last good list is served with a warning (or an empty list when
there never was one), and the next attempt waits `retry_s` (at most 5 s) so an outage
is not hammered. Ids are used exactly as the gateway names them (`cx/gpt-5.3-codex-spark`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from popagent_core.errors import NotFound
from popagent_core.model_catalog import catalog_entries, context_window

logger = logging.getLogger(__name__)

MAX_MODELS = 2000
MAX_MODEL_ID_CHARS = 200


@dataclass(frozen=True)
class CatalogView:
    models: tuple[str, ...] = ()
    context_windows: dict[str, int] = field(default_factory=dict)
    # True while the list comes from a successful fetch younger than the TTL.
    fresh: bool = False
    warning: str | None = None


def parse_catalog(raw: bytes) -> tuple[tuple[str, ...], dict[str, int]]:
    """Model ids and context windows of an OpenAI-compatible `/models` answer; ValueError if it is not one."""
    models: dict[str, None] = {}
    windows: dict[str, int] = {}
    for entry in catalog_entries(raw, limit=MAX_MODELS):
        model_id = entry["id"]
        if not 0 < len(model_id) <= MAX_MODEL_ID_CHARS or model_id in models:
            continue
        models[model_id] = None
        window = context_window(entry)
        if window is not None:
            windows[model_id] = window
    return tuple(models), windows


class ModelCatalog:
    def __init__(
        self,
        url: str,
        *,
        api_key: str = "",
        ttl_s: float = 60.0,
        retry_s: float | None = None,
        timeout_s: float = 3.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url.rstrip("/") + "/models" if url else ""
        self.api_key = api_key
        self.ttl_s = ttl_s
        # After a failure, wait before asking again (never longer than a fresh answer lives).
        self.retry_s = retry_s if retry_s is not None else min(5.0, ttl_s)
        self.timeout_s = timeout_s
        self.clock = clock
        self._models: tuple[str, ...] = ()
        self._windows: dict[str, int] = {}
        self._fetched_at: float | None = None
        self._failed_at: float | None = None
        self._failure = ""
        self._lock = asyncio.Lock()

    def _fresh(self, now: float) -> bool:
        return self._fetched_at is not None and now - self._fetched_at < self.ttl_s

    def _view(self) -> CatalogView:
        now = self.clock()
        if self._fresh(now):
            return CatalogView(self._models, dict(self._windows), fresh=True)
        if not self.url:
            return CatalogView(warning="model catalog is not configured (NINEROUTER_URL is unset)")
        if self._fetched_at is None:
            return CatalogView(warning=f"model catalog unavailable ({self._failure})")
        age = int(now - self._fetched_at)
        return CatalogView(
            self._models,
            dict(self._windows),
            warning=f"model catalog unavailable ({self._failure}); serving the list fetched {age} s ago",
        )

    async def view(self) -> CatalogView:
        """The current catalog, refreshed when older than the TTL (one refresh at a time)."""
        if self._fresh(self.clock()) or not self.url:
            return self._view()
        async with self._lock:
            now = self.clock()
            retry_due = self._failed_at is None or now - self._failed_at >= self.retry_s
            if not self._fresh(now) and retry_due:
                await self._refresh()
        return self._view()

    async def _refresh(self) -> None:
        headers = {"authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        try:
            async with httpx.AsyncClient(timeout=self.timeout_s) as client:
                response = await client.get(self.url, headers=headers)
                response.raise_for_status()
                models, windows = parse_catalog(response.content)
        except (httpx.HTTPError, ValueError) as exc:
            self._failed_at = self.clock()
            self._failure = (
                f"HTTP {exc.response.status_code}" if isinstance(exc, httpx.HTTPStatusError) else type(exc).__name__
            )
            logger.warning(
                "model catalog unavailable",
                extra={"url": self.url, "error": self._failure, "cached_models": len(self._models)},
            )
            return
        self._models, self._windows = models, windows
        self._fetched_at = self.clock()
        self._failed_at = None
        self._failure = ""


async def ensure_known_model(catalog: ModelCatalog, model: str) -> str | None:
    """Refuse a model the catalog does not list (NotFound, HTTP 404: the request names a model
    that is not there, which no schema can say ahead).

    Fails open during a catalog outage: the model is accepted and a warning returned
    (also logged), so an unreachable model gateway never blocks settings or chat.
    """
    view = await catalog.view()
    if model in view.models:
        return None
    if view.fresh:
        raise NotFound(f"unknown model {model!r}: the model catalog does not list it")
    warning = f"model {model!r} was not checked: {view.warning}"
    logger.warning("unchecked model accepted", extra={"model": model, "reason": view.warning})
    return warning
