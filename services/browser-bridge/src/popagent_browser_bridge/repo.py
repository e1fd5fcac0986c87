"""The browser settings singleton (popagent_browser_settings) and the held takeovers."""

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
    # browser_run_code_unsafe for interactive agents.
    allow_code_execution: bool
    updated_at: datetime


def _settings(row: asyncpg.Record | None) -> BrowserSettings:
    if row is None:
        raise ConfigurationError("browser settings row is missing")
    if row["allow_code_execution"] is None:
        raise ConfigurationError("browser settings allow_code_execution is not seeded")
    return BrowserSettings(
        enabled=row["enabled"], allow_code_execution=row["allow_code_execution"], updated_at=row["updated_at"]
    )


class BrowserSettingsRepo:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def get(self) -> BrowserSettings:
        with wrap_db_errors():
            return _settings(await self.pool.fetchrow(QUERIES["get_browser_settings"]))

    async def update(self, enabled: bool | None, allow_code_execution: bool | None) -> BrowserSettings:
        with wrap_db_errors():
            return _settings(
                await self.pool.fetchrow(QUERIES["update_browser_settings"], enabled, allow_code_execution)
            )


class TakeoverRepo:
    """The chat sessions a user holds the browser of (popagent_browser_takeovers)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def held(self) -> list[str]:
        with wrap_db_errors():
            return [row["session_id"] for row in await self.pool.fetch(QUERIES["list_takeovers"])]

    async def set(self, session_id: str, held: bool) -> None:
        with wrap_db_errors():
            await self.pool.execute(QUERIES["hold_takeover" if held else "release_takeover"], session_id)


class TabOwnerRepo:
    """Each tab's owning chat session by the page's browser target id (popagent_browser_tab_owners)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def owners(self) -> dict[str, str]:
        with wrap_db_errors():
            return {row["target_id"]: row["session_id"] for row in await self.pool.fetch(QUERIES["list_tab_owners"])}

    async def save(self, owners: dict[str, str], gone: list[str]) -> None:
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                if gone:
                    await conn.execute(QUERIES["forget_tab_owners"], gone)
                for target, session_id in owners.items():
                    await conn.execute(QUERIES["save_tab_owner"], target, session_id)
