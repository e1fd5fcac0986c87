"""Wiring of the tasks service: kernel (schema, pool, NATS, outbox, gRPC server) then its own parts."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from popagent_core.service import service_kernel
from popagent_tasks.settings import Settings

MIGRATIONS = Path(__file__).parent / "migrations"


@contextlib.asynccontextmanager
async def build(settings: Settings) -> AsyncIterator[None]:
    async with service_kernel("tasks", settings, MIGRATIONS) as kernel, kernel.serving(settings.grpc_address):
        yield
