"""Wiring of the agent-runner service: kernel (schema, pool, NATS, outbox, gRPC server) then its own parts."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from popagent_agent_runner.settings import Settings
from popagent_core.service import service_kernel

MIGRATIONS = Path(__file__).parent / "migrations"


@contextlib.asynccontextmanager
async def build(settings: Settings) -> AsyncIterator[None]:
    async with service_kernel("agent-runner", settings, MIGRATIONS) as kernel, kernel.serving(settings.grpc_address):
        yield
