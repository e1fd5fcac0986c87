"""Settings singletons: read the one row, or update it with every rule checked on the merged row."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import asyncpg

from popagent_agent_runner.state.settings_rules import SettingsRules, Violation
from popagent_core.db import wrap_db_errors
from popagent_core.errors import ConfigurationError


class SingletonSettings:
    def __init__(
        self, pool: asyncpg.Pool, name: str, rules: SettingsRules, queries: Mapping[str, str], prefix: str
    ) -> None:
        self.pool = pool
        self.name = name
        self.rules = rules
        self._get = queries[f"get_{prefix}"]
        self._lock = queries[f"lock_{prefix}"]
        self._update = queries[f"update_{prefix}"]

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(self.rules.fields)

    def _present(self, row: asyncpg.Record | None) -> asyncpg.Record:
        if row is None:
            # Seeded once by a data migration: a missing row means the database was
            # tampered with or never migrated, never a reason to invent defaults.
            raise ConfigurationError(f"{self.name} settings row is missing")
        return row

    async def get(self) -> asyncpg.Record:
        with wrap_db_errors():
            return self._present(await self.pool.fetchrow(self._get))

    async def update(self, changes: Mapping[str, Any]) -> tuple[asyncpg.Record, list[Violation]]:
        """Apply `changes` (column -> value). On any violation nothing is written and the
        current row comes back with the violations."""
        unknown = set(changes) - set(self.columns)
        if unknown:
            raise ValueError(f"unknown {self.name} settings columns: {sorted(unknown)}")
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                current = self._present(await conn.fetchrow(self._lock))
                merged = {column: changes.get(column, current[column]) for column in self.columns}
                violations = self.rules.violations(merged)
                if violations:
                    return current, violations
                if all(merged[column] == current[column] for column in self.columns):
                    return current, []
                updated = await conn.fetchrow(self._update, *(merged[column] for column in self.columns))
                return self._present(updated), []
