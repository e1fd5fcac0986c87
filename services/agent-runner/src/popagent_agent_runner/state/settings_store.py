"""Settings singletons: read the one row, or update it with every rule checked on the merged row."""

from __future__ import annotations

import types
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

import asyncpg

from popagent_agent_runner.state.settings_rules import SettingsRules, Violation
from popagent_core import bus
from popagent_core.db import wrap_db_errors
from popagent_core.errors import ConfigurationError


@dataclass(frozen=True, slots=True)
class SettingsRecord:
    """The one row of a settings singleton: every column its rules name, read-only."""

    values: Mapping[str, Any]
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class ChangeFact:
    """The fact a committed change publishes through the outbox, in the change's transaction."""

    subject: str
    payload: bytes


class SingletonSettings:
    def __init__(
        self,
        *,
        pool: asyncpg.Pool,
        name: str,
        rules: SettingsRules,
        queries: Mapping[str, str],
        prefix: str,
        changed: ChangeFact | None = None,
    ) -> None:
        self.pool = pool
        self.name = name
        self.rules = rules
        self.changed = changed
        self._get = queries[f"get_{prefix}"]
        self._lock = queries[f"lock_{prefix}"]
        self._update = queries[f"update_{prefix}"]

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(self.rules.fields)

    def _record(self, row: asyncpg.Record | None) -> SettingsRecord:
        if row is None:
            # Seeded once by a data migration: a missing row means the database was
            # tampered with or never migrated, never a reason to invent defaults.
            raise ConfigurationError(f"{self.name} settings row is missing")
        values = types.MappingProxyType({column: row[column] for column in self.columns})
        return SettingsRecord(values, row["updated_at"])

    async def get(self) -> SettingsRecord:
        with wrap_db_errors():
            return self._record(await self.pool.fetchrow(self._get))

    async def update(self, changes: Mapping[str, Any]) -> tuple[SettingsRecord, list[Violation]]:
        """Apply `changes` (column -> value). On any violation nothing is written and the
        current row comes back with the violations."""
        unknown = set(changes) - set(self.columns)
        if unknown:
            raise ValueError(f"unknown {self.name} settings columns: {sorted(unknown)}")
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                current = self._record(await conn.fetchrow(self._lock))
                merged = {column: changes.get(column, current.values[column]) for column in self.columns}
                violations = self.rules.violations(merged)
                if violations:
                    return current, violations
                if merged == dict(current.values):
                    return current, []
                updated = self._record(await conn.fetchrow(self._update, *(merged[column] for column in self.columns)))
                if self.changed is not None:
                    await bus.enqueue_event(cast(asyncpg.Connection, conn), self.changed.subject, self.changed.payload)
                return updated, []
