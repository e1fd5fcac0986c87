"""The observability store's writer: every process exports its own spans there, in batches.

    async with span_store_export(settings.observability_database_url, "tasks"):
        ...   # finished spans of this process go to OBSERVABILITY_DATABASE_URL

Who writes: each process, through this kernel exporter, straight into the store. A single
owner (a collector service fed over NATS or gRPC) would put one more hop, one more queue and
one more process that can be down between a span and its row, and would carry every span of
every turn across the bus the turns themselves use. Direct export keeps a store outage local:
each process drops and counts its own spans, and the gateway only reads.

Never in the way of a turn: `on_end` (called as a span ends, on the event loop) appends to a
bounded buffer and returns; a full buffer drops the span and counts it. A background task
writes a batch when one is full or every `flush_interval_s`. While the store is unreachable a
batch is dropped (counted, with the reason kept for `/api/observability/health`) and the
writer retries with backoff, so export resumes by itself once the store is back.

Every process's figures reach the health route through the store too: the writer upserts a
heartbeat row (`popagent_exporters`, one per service and host:pid) with its queue depth,
exported and dropped counts and its last failed write: every `heartbeat_interval_s` while the
figures change, every `IDLE_HEARTBEAT_S` while they do not. A process that cannot reach the
store cannot say so there; its row then ages, and the health route calls it stale, while the
gateway's own live figures still say why.

An idle process holds no store connection: the pool closes one unused for
`IDLE_CONNECTION_S`, and the first heartbeat and retention pass of a process that writes nothing
wait `FIRST_BEAT_S` and `FIRST_RETENTION_S` after start (a PostgreSQL backend per process, kept
open, was most of what tracing added to the stack's idle memory).

Retention (`popagent_core.settings.Retention`, the POPAGENT_OBSERVABILITY_RETENTION_* settings):
after a write, at most once per `retention_interval_s`, and at least once a day even without
writes, the writer removes spans, logs and feedback older than the retention days and the
oldest spans and logs over the row cap, as the hook audit does. Every process's writer does
it; the passes are idempotent, so several processes only repeat cheap indexed deletes.

The store is its own database (`OBSERVABILITY_DATABASE_URL`) with its own schema and ledger,
migrated by the first writer that connects (under the migration runner's advisory lock).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import logging
import os
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import orjson
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.instrumentation.utils import suppress_instrumentation
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.trace import Span, StatusCode

from popagent_core.db import load_queries
from popagent_core.log import span_ids
from popagent_core.migrate import migrate
from popagent_core.secret_text import REDACTED, names_id, names_secret, redact_secrets
from popagent_core.settings import Retention

logger = logging.getLogger(__name__)

STORE_SCHEMA = "observability"
STORE_MIGRATIONS = Path(__file__).parent / "span_store_migrations"
STORE_QUERIES_FILE = Path(__file__).parent / "span_store_queries.sql"
STORE_QUERIES = load_queries(STORE_QUERIES_FILE)
RETENTION_INTERVAL_S = 60.0
HEARTBEAT_INTERVAL_S = 5.0
IDLE_HEARTBEAT_S = 60.0
# A heartbeat older than this is stale: the process stopped, or cannot reach the store.
STALE_HEARTBEAT_S = IDLE_HEARTBEAT_S + 2 * HEARTBEAT_INTERVAL_S
FIRST_BEAT_S = 10.0
FIRST_RETENTION_S = 60.0
IDLE_CONNECTION_S = 10.0
DAILY_S = 24 * 3600.0
DEFAULT_RETENTION = Retention()

MAX_LOG_MESSAGE_CHARS = 2000
MAX_LOG_FIELD_CHARS = 500


def bounded_redacted(value: str, limit: int) -> str:
    """`value` with its credentials redacted (`popagent_core.secret_text`), cut to `limit`.

    Cut to twice the limit first, so a huge value costs no more than a bounded one: a credential
    cut in two there lies past `limit` once redacted (unless the part before held more than
    `limit` characters of other credentials)."""
    value = redact_secrets(value[: 2 * limit])
    return value if len(value) <= limit else value[:limit] + "…"


class Redactor:
    """Takes credentials out of text bound for the store: this process's secret settings, and
    whatever `popagent_core.secret_text` finds."""

    def __init__(self, secrets: tuple[str, ...] = ()) -> None:
        self.secrets = tuple(sorted({s for s in secrets if len(s) >= 8}, key=len, reverse=True))

    def text(self, value: str, limit: int) -> str:
        for secret in self.secrets:
            if secret in value:
                value = value.replace(secret, REDACTED)
        return bounded_redacted(value, limit)

    def field(self, name: str, value: object) -> object:
        """An extra field of a log record as stored: redacted by its name, or by its text."""
        if names_secret(name):
            return REDACTED
        if names_id(name) and isinstance(value, str) and len(value) <= MAX_LOG_FIELD_CHARS:
            return value
        return self.text(str(value), MAX_LOG_FIELD_CHARS)


def secret_values(settings: object) -> tuple[str, ...]:
    """The values of a settings object's secret fields (declared `repr=False`), as text."""
    fields = getattr(type(settings), "model_fields", {})
    found: list[str] = []
    for name, info in fields.items():
        if info.repr:
            continue
        value = getattr(settings, name, None)
        values = value if isinstance(value, tuple | list) else (value,)
        for item in values:
            if isinstance(item, bytes):
                found += [base64.b64encode(item).decode(), item.hex()]
            elif isinstance(item, str) and item:
                found.append(item)
    return tuple(found)


def _timestamp(nanos: int | None) -> datetime:
    return datetime.fromtimestamp((nanos or 0) / 1e9, tz=UTC)


# A stored attribute's text is cut here: a SQL span's statement is the whole query (kilobytes for
# the turn's big reads), stored and read back for every turn otherwise.
MAX_ATTRIBUTE_CHARS = 1000


def _bounded(value: Any) -> Any:
    return value[:MAX_ATTRIBUTE_CHARS] + "…" if isinstance(value, str) and len(value) > MAX_ATTRIBUTE_CHARS else value


def _stored_attribute(key: str, value: Any) -> Any:
    if not isinstance(value, str) or names_id(key):
        return _bounded(value)
    return _stored_text(value[: 2 * MAX_ATTRIBUTE_CHARS])


@functools.lru_cache(maxsize=1024)
def _stored_text(value: str) -> str:
    # Cached: most attribute texts repeat (a SQL statement, a route), and every span has some.
    return bounded_redacted(value, MAX_ATTRIBUTE_CHARS)


def span_row(span: ReadableSpan) -> tuple[Any, ...]:
    context = span.context
    assert context is not None
    attributes = {key: _stored_attribute(key, value) for key, value in (span.attributes or {}).items()}
    service = str(span.resource.attributes.get("service.name", "unknown"))
    started, ended = span.start_time or 0, span.end_time or span.start_time or 0
    return (
        trace.format_trace_id(context.trace_id),
        trace.format_span_id(context.span_id),
        trace.format_span_id(span.parent.span_id) if span.parent is not None else None,
        span.name,
        span.kind.name.lower(),
        service,
        _timestamp(started),
        _timestamp(ended),
        (ended - started) / 1e6,
        span.status.status_code.name.lower() if span.status.status_code is not StatusCode.UNSET else "ok",
        _stored_text(span.status.description[: 2 * MAX_ATTRIBUTE_CHARS])
        if span.status.description
        else span.status.description,
        orjson.dumps(attributes, default=str).decode(),
        attributes.get("gen_ai.conversation.id"),
        attributes.get("gen_ai.agent.id"),
    )


@dataclass
class ExportStats:
    """What `/api/observability/health` reports of one process's exporter."""

    exported: int = 0
    dropped: int = 0
    exported_logs: int = 0
    dropped_logs: int = 0
    last_error: str = ""
    # The last failed write, kept after export resumed (for the heartbeat row), and when.
    last_failure: str = ""
    last_failure_at: datetime | None = None
    store_reachable: bool = False
    # Which store (the DSN, never shown: it may hold a password); for tests of in-process stacks.
    store_dsn: str = field(default="", repr=False)
    queue_depth: int = 0
    queue_limit: int = 0


class SpanStoreProcessor(SpanProcessor):
    """Buffers finished spans (bounded) for `SpanStoreWriter`; never blocks, never raises."""

    def __init__(self, max_queue: int = 4096) -> None:
        self.max_queue = max_queue
        self.buffer: list[ReadableSpan] = []
        self.logs: list[tuple[Any, ...]] = []
        self.stats = ExportStats(queue_limit=max_queue)
        self.full = asyncio.Event()
        self.batch_size = 256

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if len(self.buffer) >= self.max_queue:
            self.stats.dropped += 1
            return
        self.buffer.append(span)
        if len(self.buffer) >= self.batch_size:
            self.full.set()

    def take(self) -> list[ReadableSpan]:
        batch, self.buffer = self.buffer, []
        self.full.clear()
        return batch

    def take_logs(self) -> list[tuple[Any, ...]]:
        batch, self.logs = self.logs, []
        return batch

    def add_log(self, row: tuple[Any, ...]) -> None:
        if len(self.logs) >= self.max_queue:
            self.stats.dropped_logs += 1
            return
        self.logs.append(row)

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class StoredLogHandler(logging.Handler):
    """Warning and error records (and those of the loggers named at start) into the store, bounded and redacted.

    Not the OpenTelemetry logs bridge: that SDK is still experimental (`opentelemetry.sdk._logs`), and
    the record needs the same bounding and redaction, the same buffer and the same writer as spans.
    """

    def __init__(self, processor: SpanStoreProcessor, service: str, redactor: Redactor, info_loggers: tuple[str, ...]):
        super().__init__(logging.INFO if info_loggers else logging.WARNING)
        self.processor = processor
        self.service = service
        self.redactor = redactor
        self.info_loggers = info_loggers

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno < logging.WARNING and not record.name.startswith(self.info_loggers or ("\0",)):
            return
        if record.name.startswith("popagent_core.span_store"):
            return  # the writer's own troubles are in its stats, not in the store it cannot reach
        try:
            extra = {
                key: self.redactor.field(key, value)
                for key, value in record.__dict__.items()
                if key not in _RECORD_KEYS and not key.startswith("_")
            }
            if record.exc_info and record.exc_info[0] is not None:
                extra["exc_type"] = record.exc_info[0].__name__
            ids = span_ids()
            self.processor.add_log(
                (
                    datetime.fromtimestamp(record.created, tz=UTC),
                    record.levelname.lower(),
                    self.service,
                    record.name,
                    self.redactor.text(record.getMessage(), MAX_LOG_MESSAGE_CHARS),
                    ids.get("trace_id"),
                    ids.get("span_id"),
                    orjson.dumps(extra).decode(),
                )
            )
        except Exception:  # a log line must never fail the code that logs it
            self.processor.stats.dropped_logs += 1


_RECORD_KEYS = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}


# Spans turned into rows between two yields to the event loop: a busy second's batch (hundreds of
# spans) must not hold up the turns sharing the loop (a first token waiting on it).
ROWS_PER_SLICE = 32


async def _rows_yielding(batch: list[ReadableSpan]) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = []
    for start in range(0, len(batch), ROWS_PER_SLICE):
        if start:
            await asyncio.sleep(0)
        rows += [span_row(span) for span in batch[start : start + ROWS_PER_SLICE]]
    return rows


class SpanStoreWriter:
    """Writes the processor's batches into the store; reconnects and re-migrates after an outage."""

    def __init__(
        self,
        dsn: str,
        processor: SpanStoreProcessor,
        *,
        flush_interval_s: float = 1.0,
        max_backoff_s: float = 10.0,
        retention: Retention = DEFAULT_RETENTION,
        retention_interval_s: float = RETENTION_INTERVAL_S,
        service: str = "unknown",
        heartbeat_interval_s: float = HEARTBEAT_INTERVAL_S,
    ) -> None:
        self.dsn = dsn
        self.service = service
        self.instance = f"{socket.gethostname()}:{os.getpid()}"
        self.started_at = datetime.now(UTC)
        self.heartbeat_interval_s = heartbeat_interval_s
        # Monotonic time of the last heartbeat (None: none yet), and the figures it carried.
        self.beat_at: float | None = None
        self.beat_figures: tuple[int, ...] = ()
        self.processor = processor
        self.flush_interval_s = flush_interval_s
        self.max_backoff_s = max_backoff_s
        self.retention = retention
        self.retention_interval_s = retention_interval_s
        # Monotonic time of the last retention pass; None: none yet (the first write or loop runs one).
        self.retained_at: float | None = None
        self.pool: asyncpg.Pool | None = None

    async def retain(self) -> int:
        """One retention pass: expired rows, then rows over the cap. Returns the rows removed."""
        pool = await self._connect()
        days, cap = self.retention.days, self.retention.max_rows
        removed = 0
        async with pool.acquire() as conn:
            for name, args in (
                ("expire_spans", (days,)),
                ("expire_logs", (days,)),
                ("expire_feedback", (days,)),
                ("expire_exporters", ()),
                ("cap_spans", (cap,)),
                ("cap_logs", (cap,)),
            ):
                status = await conn.execute(STORE_QUERIES[name], *args)
                removed += int(status.rsplit(" ", 1)[-1])
        self.retained_at = asyncio.get_running_loop().time()
        return removed

    async def retain_when_due(self, interval_s: float) -> None:
        """A retention pass if none ran in the last `interval_s`; a failure waits for the next one."""
        now = asyncio.get_running_loop().time()
        if self.retained_at is not None and now - self.retained_at < interval_s:
            return
        try:
            await self.retain()
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as exc:
            self.retained_at = now  # not again at once: the next write or the daily pass retries
            logger.debug("span store retention failed", extra={"error": type(exc).__name__})

    async def heartbeat(self) -> None:
        """Upsert this process's exporter figures into `popagent_exporters`."""
        stats = self.processor.stats
        try:
            pool = await self._connect()
            await pool.execute(
                STORE_QUERIES["heartbeat"],
                self.service,
                self.instance,
                self.started_at,
                stats.exported,
                stats.dropped,
                stats.exported_logs,
                stats.dropped_logs,
                len(self.processor.buffer),
                self.processor.max_queue,
                stats.last_failure,
                stats.last_failure_at,
            )
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as exc:
            await self._failed(exc)
            raise
        stats.store_reachable = True
        stats.last_error = ""
        self.beat_at = asyncio.get_running_loop().time()
        self.beat_figures = self._figures()

    def _figures(self) -> tuple[int, ...]:
        stats = self.processor.stats
        return (stats.exported, stats.dropped, stats.exported_logs, stats.dropped_logs, len(self.processor.buffer))

    async def heartbeat_when_due(self, started_at: float) -> None:
        """A heartbeat every `heartbeat_interval_s` while the figures change, every `IDLE_HEARTBEAT_S` else;
        the first once something was exported, or `FIRST_BEAT_S` after `started_at` (loop time)."""
        now = asyncio.get_running_loop().time()
        changed = self._figures() != self.beat_figures
        if self.beat_at is None:
            due = (changed and self.processor.stats.exported > 0) or now - started_at >= FIRST_BEAT_S
        else:
            due = now - self.beat_at >= (self.heartbeat_interval_s if changed else IDLE_HEARTBEAT_S)
        if due:
            await self.heartbeat()

    async def _failed(self, exc: BaseException) -> None:
        """Note a failed write and drop the pool (the next write reconnects, and migrates again)."""
        stats = self.processor.stats
        stats.store_reachable = False
        stats.last_error = stats.last_failure = f"{type(exc).__name__}: {str(exc)[:200]}"
        stats.last_failure_at = datetime.now(UTC)
        if self.pool is not None:
            pool, self.pool = self.pool, None
            with contextlib.suppress(Exception):
                await asyncio.wait_for(pool.close(), 2)

    async def _connect(self) -> asyncpg.Pool:
        if self.pool is None:
            await migrate(self.dsn, STORE_SCHEMA, STORE_MIGRATIONS, kernel=False)
            self.pool = await asyncpg.create_pool(
                self.dsn,
                min_size=0,
                max_size=2,
                max_inactive_connection_lifetime=IDLE_CONNECTION_S,
                # Spans are telemetry, dropped whenever the store is down: a commit need not wait for its
                # WAL to reach the disk (a server crash may lose the last ~0.6 s of them), which spares
                # the store's server a flush per batch while it also serves the turns' commits.
                server_settings={
                    "search_path": STORE_SCHEMA,
                    "application_name": "popagent-span-store",
                    "synchronous_commit": "off",
                },
            )
        return self.pool

    async def flush(self) -> int:
        """Write what is buffered now; a failed batch is dropped and counted. Returns the rows written."""
        batch = self.processor.take()
        logs = self.processor.take_logs()
        stats = self.processor.stats
        if not batch and not logs:
            return 0
        rows = await _rows_yielding(batch)
        try:
            pool = await self._connect()
            if rows:
                await pool.execute(STORE_QUERIES["insert_spans"], *(list(column) for column in zip(*rows, strict=True)))
            if logs:
                await pool.execute(STORE_QUERIES["insert_logs"], *(list(column) for column in zip(*logs, strict=True)))
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as exc:
            stats.dropped += len(batch)
            stats.dropped_logs += len(logs)
            await self._failed(exc)
            raise
        stats.exported += len(batch)
        stats.exported_logs += len(logs)
        stats.store_reachable = True
        stats.last_error = ""
        await self.retain_when_due(self.retention_interval_s)
        return len(batch)

    async def run(self) -> None:
        backoff = 0.5
        started_at = asyncio.get_running_loop().time()
        if self.retained_at is None:
            # The first daily pass a minute after start (a write runs one at once).
            self.retained_at = started_at - DAILY_S + FIRST_RETENTION_S
        # The writer's own queries make no spans (they would feed the buffer they empty).
        with suppress_instrumentation():
            while True:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.processor.full.wait(), self.flush_interval_s)
                try:
                    await self.flush()
                    await self.heartbeat_when_due(started_at)
                    # The daily pass, for a store this process has stopped writing to.
                    await self.retain_when_due(DAILY_S)
                    backoff = 0.5
                except Exception as exc:
                    logger.debug("span store write failed", extra={"error": type(exc).__name__})
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, self.max_backoff_s)

    async def close(self) -> None:
        with suppress_instrumentation(), contextlib.suppress(Exception):
            await asyncio.wait_for(self.flush(), 3)
        if self.pool is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.pool.close(), 3)
            self.pool = None


# One exporter per process: in a test process several services share the provider (and the store).
_active: SpanStoreProcessor | None = None


def active_stats() -> ExportStats | None:
    """This process's exporter figures, with the current queue depth; None when it exports to no store."""
    if _active is None:
        return None
    _active.stats.queue_depth = len(_active.buffer)
    return _active.stats


@contextlib.asynccontextmanager
async def span_store_export(
    dsn: str,
    *,
    service: str = "",
    secrets: tuple[str, ...] = (),
    info_loggers: tuple[str, ...] = (),
    max_queue: int = 4096,
    flush_interval_s: float = 1.0,
    retention: Retention = DEFAULT_RETENTION,
) -> AsyncIterator[None]:
    """Export this process's finished spans to the store at `dsn` for the lifetime of the block.

    Does nothing when `dsn` is empty, tracing is off, or another block of this process exports already.
    """
    global _active
    provider = trace.get_tracer_provider()
    if not dsn or not isinstance(provider, TracerProvider) or _active is not None:
        yield
        return
    processor = SpanStoreProcessor(max_queue)
    processor.stats.store_dsn = dsn
    service_name = service or str(provider.resource.attributes.get("service.name", "unknown"))
    writer = SpanStoreWriter(
        dsn, processor, flush_interval_s=flush_interval_s, retention=retention, service=service_name
    )
    provider.add_span_processor(processor)
    _active = processor
    handler = StoredLogHandler(processor, service_name, Redactor(secrets), info_loggers)
    logging.getLogger().addHandler(handler)
    task = asyncio.create_task(writer.run(), name="span-store-writer")
    try:
        yield
    finally:
        logging.getLogger().removeHandler(handler)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        # Nothing more goes into this process's buffer (the provider keeps the processor object).
        processor.max_queue = 0
        _active = None
        await writer.close()
