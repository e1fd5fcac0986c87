"""Wiring of the hooks service: kernel (schema, pool, NATS, outbox, gRPC server) then its own parts.

Unwinding stops accepting RPCs first, then the session-deleted consumer and the
maintenance job, then writes what the audit queue still holds, then closes the
outbound connection pool.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from google.protobuf.message import DecodeError
from nats.aio.msg import Msg

from popagent.events.v1 import events_pb2
from popagent.hooks.v1 import hooks_pb2_grpc
from popagent_core import bus, subjects
from popagent_core.lifecycle import background_task
from popagent_core.service import service_kernel
from popagent_hooks.audit import AuditRepo, AuditWriter, delete_session_runs, maintenance_loop
from popagent_hooks.dispatcher import Dispatcher
from popagent_hooks.servicer import HooksServicer
from popagent_hooks.settings import Settings
from popagent_hooks.transport import HookTransport

logger = logging.getLogger(__name__)

MIGRATIONS = Path(__file__).parent / "migrations"
SESSION_DELETED_DURABLE = "hooks-session-deleted"


@dataclass(frozen=True)
class RunningHooks:
    port: int
    writer: AuditWriter


async def _on_session_deleted(repo: AuditRepo, writer: AuditWriter, msg: Msg) -> None:
    try:
        event = events_pb2.SessionDeleted.FromString(msg.data)
    except DecodeError:
        # Redelivery cannot fix a payload that does not parse: log it and let it be acked.
        logger.warning("undecodable session-deleted event dropped", extra={"subject": msg.subject})
        return
    if event.session_id:
        deleted = await delete_session_runs(repo, writer, event.session_id)
        logger.info("hook audit of deleted session removed", extra={"session_id": event.session_id, "rows": deleted})


@contextlib.asynccontextmanager
async def build(settings: Settings) -> AsyncIterator[RunningHooks]:
    async with service_kernel("hooks", settings, MIGRATIONS) as kernel, contextlib.AsyncExitStack() as stack:
        transport = HookTransport(allow_private=settings.allow_private_addresses, ca_file=settings.ca_file)
        stack.push_async_callback(transport.aclose)
        repo = AuditRepo(kernel.pool)
        writer = AuditWriter(repo)
        await stack.enter_async_context(background_task(writer.run, name="hooks-audit-writer"))
        stack.push_async_callback(writer.drain)
        await stack.enter_async_context(
            background_task(functools.partial(maintenance_loop, repo), name="hooks-audit-maintenance")
        )
        consumer = functools.partial(
            bus.consume,
            kernel.js,
            subject=subjects.SESSION_DELETED,
            durable=SESSION_DELETED_DURABLE,
            handler=functools.partial(_on_session_deleted, repo, writer),
        )
        await stack.enter_async_context(background_task(consumer, name="hooks-session-deleted"))

        dispatcher = Dispatcher(settings.hooks, transport, audit=writer.submit)
        hooks_pb2_grpc.add_HooksServiceServicer_to_server(HooksServicer(dispatcher, repo, writer), kernel.server)
        logger.info(
            "hooks configured",
            extra={
                "digest": settings.hooks.digest,
                "handlers": {event.value: [h.id for h in hs] for event, hs in settings.hooks.handlers.items()},
            },
        )
        port = await stack.enter_async_context(kernel.serving(settings.grpc_address))
        yield RunningHooks(port, writer)
