"""EvolutionService: proto <-> repository only."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import grpc

from popagent.evolution.v1 import evolution_pb2, evolution_pb2_grpc
from popagent_core.db import load_queries, wrap_db_errors
from popagent_core.errors import ConfigurationError

QUERIES = load_queries(Path(__file__).parent / "queries.sql")


class EvolutionServicer(evolution_pb2_grpc.EvolutionServiceServicer):
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def GetAutonomySettings(
        self, request: evolution_pb2.GetAutonomySettingsRequest, context: grpc.aio.ServicerContext
    ) -> evolution_pb2.AutonomySettings:
        with wrap_db_errors():
            row = await self.pool.fetchrow(QUERIES["get_autonomy_settings"])
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
