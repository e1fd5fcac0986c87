"""The browser settings singleton (popagent_browser_settings)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import asyncpg

from popagent_core.db import load_queries, wrap_db_errors
from popagent_core.errors import ConfigurationError

QUERIES = load_queries(Path(__file__).parent / "queries.sql")


@dataclass(frozen=True, slots=True)
class BrowserSettings:
    enabled: bool
    updated_at: datetime


def _settings(row: asyncpg.Record | None) -> BrowserSettings:
    if row is None:
        raise ConfigurationError("browser settings row is missing")
    return BrowserSettings(enabled=row["enabled"], updated_at=row["updated_at"])


class BrowserSettingsRepo:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def get(self) -> BrowserSettings:
        with wrap_db_errors():
            return _settings(await self.pool.fetchrow(QUERIES["get_browser_settings"]))

    async def set_enabled(self, enabled: bool) -> BrowserSettings:
        with wrap_db_errors():
            return _settings(await self.pool.fetchrow(QUERIES["update_browser_settings"], enabled))
