"""What every gRPC service opens before its own parts: schema, pool, NATS, outbox relay, server.

    @asynccontextmanager
    async def build(settings):
        async with service_kernel("tasks", settings, MIGRATIONS) as kernel:
            tasks_pb2_grpc.add_TasksServiceServicer_to_server(TasksServicer(...), kernel.server)
            async with kernel.serving(settings.grpc_address):
                yield

Unwinding stops accepting RPCs (with grace) before NATS drains and the pool closes.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import grpc
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext

from popagent_core import bus, db, grpc_server
from popagent_core.auth import CallerRegistry
from popagent_core.lifecycle import background_task
from popagent_core.migrate import migrate
from popagent_core.settings import ServiceSettings
from popagent_core.span_store import secret_values, span_store_export
from popagent_core.topology import service_named


@dataclass
class Kernel:
    name: str
    pool: asyncpg.Pool
    nats: NatsClient
    js: JetStreamContext
    server: grpc.aio.Server
    health: grpc_server.HealthServicer
    outbox: bus.OutboxRelay

    def serving(
        self, address: str, *, service_names: tuple[str, ...] = (), grace_s: float = 3.0
    ) -> contextlib.AbstractAsyncContextManager[int]:
        """Serve; health reports SERVING for "" and for each full service name given
        (e.g. `evolution_pb2.DESCRIPTOR.services_by_name["EvolutionService"].full_name`)."""
        return grpc_server.running(self.server, self.health, address, service_names=service_names, grace_s=grace_s)


def schema_for(service: str) -> str:
    return service.replace("-", "_")


@contextlib.asynccontextmanager
async def service_kernel(
    service: str, settings: ServiceSettings, migrations_dir: Path, *, pool_max_size: int = 10
) -> AsyncIterator[Kernel]:
    spec = service_named(service)
    callers = CallerRegistry.from_json(settings.internal_callers)
    schema = schema_for(service)
    await migrate(settings.database_url, schema, migrations_dir)
    async with contextlib.AsyncExitStack() as stack:
        pool = await stack.enter_async_context(
            db.open_pool(settings.database_url, schema, max_size=pool_max_size, application_name=f"popagent-{service}")
        )
        nc = await stack.enter_async_context(bus.connect(settings.nats_url, name=service))
        js = nc.jetstream()
        if spec.subjects_owner is not None:
            await bus.ensure_streams(js, (spec.subjects_owner,), replicas=settings.nats_stream_replicas)
        await stack.enter_async_context(
            span_store_export(
                settings.observability_database_url,
                service=f"popagent-{service}",
                secrets=secret_values(settings),
                info_loggers=settings.stored_info_loggers,
                retention=settings.observability_retention,
            )
        )
        relay = bus.OutboxRelay(pool, js, stream_replicas=settings.nats_stream_replicas)
        await stack.enter_async_context(background_task(relay.run, name=f"{service}-outbox"))
        server, health_servicer = grpc_server.create_server(callers)
        yield Kernel(service, pool, nc, js, server, health_servicer, relay)
