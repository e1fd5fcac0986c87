"""Wiring of the evolution service."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from popagent.evolution.v1 import evolution_pb2_grpc
from popagent_core.service import service_kernel
from popagent_evolution.repo import AutonomySettingsRepo
from popagent_evolution.servicer import EvolutionServicer
from popagent_evolution.settings import Settings

MIGRATIONS = Path(__file__).parent / "migrations"


@contextlib.asynccontextmanager
async def build(settings: Settings) -> AsyncIterator[None]:
    async with service_kernel("evolution", settings, MIGRATIONS) as kernel:
        evolution_pb2_grpc.add_EvolutionServiceServicer_to_server(
            EvolutionServicer(AutonomySettingsRepo(kernel.pool)), kernel.server
        )
        async with kernel.serving(settings.grpc_address):
            yield
