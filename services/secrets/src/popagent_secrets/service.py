"""Wiring of the secrets service: kernel (schema, pool, NATS, outbox, gRPC server) then its own parts."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from popagent.secrets.v1 import secrets_pb2_grpc
from popagent_core.service import service_kernel
from popagent_secrets.servicer import SecretsServicer
from popagent_secrets.settings import Settings
from popagent_secrets.store import SecretStore

MIGRATIONS = Path(__file__).parent / "migrations"


@contextlib.asynccontextmanager
async def build(settings: Settings) -> AsyncIterator[None]:
    async with service_kernel("secrets", settings, MIGRATIONS) as kernel:
        store = SecretStore(kernel.pool, settings.keyring())
        secrets_pb2_grpc.add_SecretsServiceServicer_to_server(SecretsServicer(store), kernel.server)
        async with kernel.serving(settings.grpc_address):
            yield
