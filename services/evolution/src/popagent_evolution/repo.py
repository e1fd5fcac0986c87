"""The autonomy settings singleton (popagent_autonomy_settings): read it, or change it under its row lock."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TypeVar

import asyncpg

from popagent.events.v1 import events_pb2
from popagent_core import subjects
from popagent_core.bus import enqueue_event
from popagent_core.db import load_queries, record_of, wrap_db_errors
from popagent_core.errors import ConfigurationError

QUERIES = load_queries(Path(__file__).parent / "queries.sql")

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class AutonomySettings:
    evolution_enabled: bool
    skill_creation_enabled: bool
    self_update_enabled: bool
    self_update_cron: str
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class AutonomyChanges:
    """What an update sets; None leaves a value as it is."""

    evolution_enabled: bool | None = None
    skill_creation_enabled: bool | None = None
    self_update_enabled: bool | None = None
    self_update_cron: str | None = None


def _settings(row: asyncpg.Record | None) -> AutonomySettings:
    if row is None:
        # The seed ran once; a missing row is a configuration error, never a reason to invent defaults.
        raise ConfigurationError("autonomy settings row is missing")
    return record_of(AutonomySettings, row)


def _pick(change: T | None, current: T) -> T:
    return current if change is None else change


class AutonomySettingsRepo:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def get(self) -> AutonomySettings:
        with wrap_db_errors():
            return _settings(await self.pool.fetchrow(QUERIES["get_autonomy_settings"]))

    async def update(self, changes: AutonomyChanges) -> AutonomySettings:
        # Row lock: the reflection worker rereads this row under the same lock before it mutates.
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                current = _settings(await conn.fetchrow(QUERIES["lock_autonomy_settings"]))
                row = await conn.fetchrow(
                    QUERIES["update_autonomy_settings"],
                    _pick(changes.evolution_enabled, current.evolution_enabled),
                    _pick(changes.skill_creation_enabled, current.skill_creation_enabled),
                    _pick(changes.self_update_enabled, current.self_update_enabled),
                    _pick(changes.self_update_cron, current.self_update_cron),
                )
                if (
                    row["evolution_enabled"],
                    row["skill_creation_enabled"],
                    row["self_update_enabled"],
                    row["self_update_cron"],
                ) != (
                    current.evolution_enabled,
                    current.skill_creation_enabled,
                    current.self_update_enabled,
                    current.self_update_cron,
                ):
                    # They gate the learned overlays and skills runs compose (from the next run), and
                    # the tasks service's self-update scheduler reconciles on it.
                    await enqueue_event(
                        conn,
                        subjects.LEARNING_CHANGED,
                        events_pb2.LearningChanged().SerializeToString(),
                    )
        return _settings(row)
