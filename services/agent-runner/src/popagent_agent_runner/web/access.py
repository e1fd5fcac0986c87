"""The web clients the web tools share, one per process, built from the settings at start."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from popagent_agent_runner.web.page_fetcher import PageFetcher
from popagent_agent_runner.web.searxng import SearxngClient


@dataclass(frozen=True)
class WebAccess:
    search: SearxngClient
    fetcher: PageFetcher


@contextlib.asynccontextmanager
async def web_access(
    *, searxng_url: str, search_timeout_s: float, fetch_timeout_s: float, fetch_max_bytes: int, allow_private: bool
) -> AsyncIterator[WebAccess]:
    search = SearxngClient(searxng_url, timeout_s=search_timeout_s)
    fetcher = PageFetcher(allow_private=allow_private, timeout_s=fetch_timeout_s, max_bytes=fetch_max_bytes)
    try:
        yield WebAccess(search, fetcher)
    finally:
        await fetcher.aclose()
        await search.aclose()
