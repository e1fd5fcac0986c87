"""Trace context across the process boundaries: outbox rows and NATS headers, gRPC metadata."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import cast

import asyncpg
import grpc
import pytest
from core.helpers import unique_subject
from nats.aio.msg import Msg
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from popagent_core import bus, db
from popagent_core.grpc_client import check_health, open_channel
from popagent_core.grpc_server import create_server, running
from popagent_core.lifecycle import background_task
from popagent_core.migrate import migrate
from popagent_core.telemetry import TRACER, continuing_trace, current_trace_id
from popagent_dev.embedded import free_port
from support.tracing import collecting_spans, hex_trace_id
from support.waiting import eventually

SCHEMA = "evolution"


@pytest.fixture
async def pool(make_database, tmp_path: Path):
    dsn = await make_database()
    await migrate(dsn, SCHEMA, tmp_path / "no-service-migrations")
    async with db.open_pool(dsn, SCHEMA, max_size=4) as pool:
        yield pool


async def test_a_relayed_outbox_event_continues_the_trace_of_the_transaction_that_wrote_it(
    pool: asyncpg.Pool, nats_url: str
) -> None:
    subject = unique_subject()
    durable = f"trace-test-{subject.split('.')[2]}"
    seen: list[str | None] = []

    async def handler(msg: Msg) -> None:
        seen.append(current_trace_id())

    with collecting_spans() as spans:
        with TRACER.start_as_current_span("state.change") as writer:
            async with pool.acquire() as conn, conn.transaction():
                await bus.enqueue_event(cast(asyncpg.Connection, conn), subject, b"fact")
        writer_trace = trace.format_trace_id(writer.get_span_context().trace_id)
        async with bus.connect(nats_url, name="trace-tests") as nc:
            js = nc.jetstream()
            await bus.ensure_streams(js, (SCHEMA,))
            # Relayed outside any span, as the relay's own loop does.
            assert await bus.OutboxRelay(pool, js).relay_once() == 1
            try:
                async with background_task(
                    lambda: bus.consume(js, subject=subject, durable=durable, handler=handler), name="consumer"
                ):
                    await eventually(lambda: len(seen) == 1, what="the event handled")
            finally:
                await js.delete_consumer(bus.subjects.stream_name(SCHEMA), durable)

        assert seen == [writer_trace]
        [consumed] = spans.named(f"{subject} process")
        assert consumed.kind is SpanKind.CONSUMER
        assert hex_trace_id(consumed) == writer_trace
        assert consumed.parent is not None and consumed.parent.span_id == writer.get_span_context().span_id


async def test_an_event_written_outside_a_trace_is_relayed_without_trace_headers(
    pool: asyncpg.Pool, nats_url: str
) -> None:
    subject = unique_subject()
    async with pool.acquire() as conn, conn.transaction():
        await bus.enqueue_event(cast(asyncpg.Connection, conn), subject, b"fact")
    assert await pool.fetchval("SELECT trace_context FROM popagent_outbox") is None


class _Echo:
    """A unary handler that answers with the trace id it runs in."""

    async def __call__(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return (current_trace_id() or "").encode()


@contextlib.asynccontextmanager
async def _echo_channel() -> AsyncIterator[grpc.aio.Channel]:
    """A channel to a running kernel server whose `/test.Echo/Trace` answers with its trace id."""
    server, health = create_server(None)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("test.Echo", {"Trace": grpc.unary_unary_rpc_method_handler(_Echo())}),)
    )
    address = f"127.0.0.1:{free_port()}"
    async with running(server, health, address, grace_s=0), open_channel(address, "") as channel:
        yield channel


async def test_a_grpc_call_carries_the_callers_trace_to_the_server() -> None:
    with collecting_spans() as spans:
        async with _echo_channel() as channel:
            call = channel.unary_unary("/test.Echo/Trace")
            task_trace = "0af7651916cd43dd8448eb211c80319c"
            with TRACER.start_as_current_span("caller", context=continuing_trace(task_trace)):
                answered = await call(b"")
        assert answered.decode() == task_trace
        kinds = {(s.name, s.kind) for s in spans.of_trace(int(task_trace, 16))}
        assert ("/test.Echo/Trace", SpanKind.CLIENT) in kinds
        assert ("/test.Echo/Trace", SpanKind.SERVER) in kinds


async def test_a_health_check_makes_no_span_on_either_side() -> None:
    """Probes run every few seconds: the tracing interceptors' filter leaves them out, even inside a trace."""
    with collecting_spans() as spans:
        async with _echo_channel() as channel:
            with TRACER.start_as_current_span("prober") as prober:
                assert await check_health(channel)
                await channel.unary_unary("/test.Echo/Trace")(b"")
        names = sorted(s.name for s in spans.of_trace(prober.get_span_context().trace_id))
        assert names == ["/test.Echo/Trace", "/test.Echo/Trace", "prober"]


async def test_with_tracing_off_a_grpc_call_passes_no_tracing_interceptor(monkeypatch: pytest.MonkeyPatch) -> None:
    """OTEL_SDK_DISABLED=true: the server and channel are built without the tracing interceptors, so
    no call pays for spans that would record nothing (here the test process's provider would record
    them, which is what shows their absence)."""
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    with collecting_spans() as spans:
        async with _echo_channel() as channel:
            call = channel.unary_unary("/test.Echo/Trace")
            with TRACER.start_as_current_span("caller") as caller:
                answered = await call(b"")
        assert answered == b""  # no trace context crossed
        names = [s.name for s in spans.of_trace(caller.get_span_context().trace_id)]
        assert names == ["caller"]
