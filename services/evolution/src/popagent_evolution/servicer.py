"""EvolutionService: proto <-> repository only."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import grpc
from croniter import croniter

from popagent.evolution.v1 import evolution_pb2, evolution_pb2_grpc
from popagent_core.db import load_queries, wrap_db_errors
from popagent_core.errors import ConfigurationError

QUERIES = load_queries(Path(__file__).parent / "queries.sql")
FLAGS = ("evolution_enabled", "skill_creation_enabled", "self_update_enabled")
MAX_CRON_CHARS = 100


def cron_violation(expression: str) -> str | None:
    """Why `expression` is not a five-field cron expression, or None."""
    if len(expression) > MAX_CRON_CHARS or len(expression.split()) != 5 or not croniter.is_valid(expression):
        return "must be a five-field cron expression (minute hour day-of-month month day-of-week)"
    return None


def _settings(row: asyncpg.Record | None) -> evolution_pb2.AutonomySettings:
    if row is None:
        # The seed ran once; a missing row is a configuration error, never a reason to invent defaults.
        raise ConfigurationError("autonomy settings row is missing")
    return evolution_pb2.AutonomySettings(
        evolution_enabled=row["evolution_enabled"],
        skill_creation_enabled=row["skill_creation_enabled"],
        self_update_enabled=row["self_update_enabled"],
        self_update_cron=row["self_update_cron"],
        updated_at=row["updated_at"].isoformat(),
    )


class EvolutionServicer(evolution_pb2_grpc.EvolutionServiceServicer):
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def GetAutonomySettings(
        self, request: evolution_pb2.GetAutonomySettingsRequest, context: grpc.aio.ServicerContext
    ) -> evolution_pb2.AutonomySettings:
        with wrap_db_errors():
            row = await self.pool.fetchrow(QUERIES["get_autonomy_settings"])
        return _settings(row)

    async def UpdateAutonomySettings(
        self, request: evolution_pb2.UpdateAutonomySettingsRequest, context: grpc.aio.ServicerContext
    ) -> evolution_pb2.UpdateAutonomySettingsResponse:
        cron = request.self_update_cron.strip() if request.HasField("self_update_cron") else None
        if cron is not None and (problem := cron_violation(cron)):
            with wrap_db_errors():
                current = _settings(await self.pool.fetchrow(QUERIES["get_autonomy_settings"]))
            return evolution_pb2.UpdateAutonomySettingsResponse(
                settings=current, violations=[evolution_pb2.FieldViolation(field="selfUpdateCron", message=problem)]
            )
        with wrap_db_errors():
            # Row lock: the reflection worker rereads this row under the same lock before it mutates.
            async with self.pool.acquire() as conn, conn.transaction():
                current = await conn.fetchrow(QUERIES["lock_autonomy_settings"])
                _settings(current)
                flags = [getattr(request, f) if request.HasField(f) else current[f] for f in FLAGS]
                row = await conn.fetchrow(
                    QUERIES["update_autonomy_settings"],
                    *flags,
                    cron if cron is not None else current["self_update_cron"],
                )
        return evolution_pb2.UpdateAutonomySettingsResponse(settings=_settings(row))
