"""Typed reads of the observability store, for /api/observability.

The gateway owns no table: the spans and logs are written by every process's exporter
(`popagent_core.span_store`) into OBSERVABILITY_DATABASE_URL, and the gateway reads them here
with its own small pool. Never the application store (docs/architecture.md, Processes).

The pool is opened on first use, after migrating the store (idempotent, under the migration
runner's lock): a store that is down when the gateway starts, or not yet written to, must not
keep the gateway from starting, and a read must not fail because no span was written yet.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg
import orjson
from asyncpg.pool import PoolConnectionProxy

from popagent_core.db import load_queries
from popagent_core.errors import Unavailable
from popagent_core.migrate import migrate
from popagent_core.span_store import STORE_MIGRATIONS, STORE_SCHEMA

QUERIES = load_queries(Path(__file__).with_name("queries.sql"))
# Lowest level first: a `level` filter means "this level or worse".
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
MAX_TRACE_SPANS = 5000
CONNECT_TIMEOUT_S = 3.0


@dataclass(frozen=True, slots=True)
class TurnFigures:
    turns: int
    errors: int
    p50_ms: float | None
    p95_ms: float | None
    first_token_p50_ms: float | None
    first_token_p95_ms: float | None


@dataclass(frozen=True, slots=True)
class TokenUsage:
    model: str
    agent_id: str
    calls: int
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    cost_usd: float | None


@dataclass(frozen=True, slots=True)
class TurnBucket:
    started_at: datetime
    turns: int
    errors: int
    p50_ms: float | None
    p95_ms: float | None


@dataclass(frozen=True, slots=True)
class ExporterHeartbeat:
    service: str
    instance: str
    started_at: datetime
    seen_at: datetime
    age_s: float
    exported_spans: int
    dropped_spans: int
    exported_logs: int
    dropped_logs: int
    queue_depth: int
    queue_limit: int
    last_error: str
    last_error_at: datetime | None


@dataclass(frozen=True, slots=True)
class TraceSummary:
    trace_id: str
    root_name: str
    started_at: datetime
    ended_at: datetime
    span_count: int
    failed: bool
    session_id: str | None
    agents: tuple[str, ...]
    services: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class StoredSpan:
    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    kind: str
    service: str
    started_at: datetime
    ended_at: datetime
    duration_ms: float
    status: str
    status_message: str | None
    attributes: dict[str, Any]


@dataclass(frozen=True, slots=True)
class StoredLog:
    id: int
    logged_at: datetime
    level: str
    service: str
    logger: str
    message: str
    trace_id: str | None
    span_id: str | None
    attributes: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Feedback:
    id: str
    created_at: datetime
    rating: str
    comment: str
    session_id: str
    message_id: str | None
    turn_id: str | None
    trace_id: str


@dataclass(frozen=True, slots=True)
class FeedbackFilter:
    since: datetime
    until: datetime
    session_id: str | None = None
    rating: str | None = None
    trace_id: str | None = None
    before: tuple[datetime, str] | None = None
    limit: int = 50


@dataclass(frozen=True, slots=True)
class TraceFilter:
    since: datetime
    until: datetime
    session_id: str | None = None
    agent_id: str | None = None
    failed: bool | None = None
    # Keyset cursor: the last listed trace's start and id.
    before: tuple[datetime, str] | None = None
    limit: int = 50


@dataclass(frozen=True, slots=True)
class LogFilter:
    since: datetime
    until: datetime
    service: str | None = None
    min_level: str | None = None
    trace_id: str | None = None
    before_id: int | None = None
    limit: int = 100


@contextlib.contextmanager
def _store_errors() -> Iterator[None]:
    try:
        yield
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as exc:
        raise Unavailable(f"the observability store is unreachable ({type(exc).__name__})") from exc


def _json(value: str | None) -> dict[str, Any]:
    return orjson.loads(value) if value else {}


class ObservabilityStore:
    """Reads spans and logs; every failure to reach the store is `Unavailable` (503)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._pool: asyncpg.Pool | None = None
        self._opening = asyncio.Lock()

    async def _connection_pool(self) -> asyncpg.Pool:
        async with self._opening:
            if self._pool is None:
                await asyncio.wait_for(
                    migrate(self.dsn, STORE_SCHEMA, STORE_MIGRATIONS, kernel=False), CONNECT_TIMEOUT_S * 2
                )
                self._pool = await asyncpg.create_pool(
                    self.dsn,
                    min_size=0,
                    max_size=3,
                    timeout=CONNECT_TIMEOUT_S,
                    server_settings={"search_path": STORE_SCHEMA, "application_name": "popagent-gateway-observability"},
                )
            return self._pool

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[PoolConnectionProxy]:
        with _store_errors():
            pool = await self._connection_pool()
            try:
                async with pool.acquire(timeout=CONNECT_TIMEOUT_S) as conn:
                    yield conn
            except (OSError, asyncpg.InterfaceError, TimeoutError, asyncpg.ConnectionDoesNotExistError):
                # The store went away under the pool: open a fresh one next time.
                await self._drop_pool()
                raise

    async def _drop_pool(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(pool.close(), 2)

    async def close(self) -> None:
        await self._drop_pool()

    async def reachable(self) -> tuple[bool, str]:
        """Whether a query reaches the store now, and why not."""
        try:
            async with self._connection() as conn:
                await conn.fetchval(QUERIES["probe"])
        except Unavailable as exc:
            cause = exc.__cause__
            return False, f"{type(cause).__name__}: {str(cause)[:200]}" if cause else exc.message
        return True, ""

    async def exporters(self, seen_within_s: float) -> list[ExporterHeartbeat]:
        """The heartbeat rows of the processes that wrote one in the last `seen_within_s`."""
        async with self._connection() as conn:
            rows = await conn.fetch(QUERIES["list_exporters"], seen_within_s)
        return [
            ExporterHeartbeat(
                service=row["service"],
                instance=row["instance"],
                started_at=row["started_at"],
                seen_at=row["seen_at"],
                age_s=row["age_s"],
                exported_spans=row["exported_spans"],
                dropped_spans=row["dropped_spans"],
                exported_logs=row["exported_logs"],
                dropped_logs=row["dropped_logs"],
                queue_depth=row["queue_depth"],
                queue_limit=row["queue_limit"],
                last_error=row["last_error"],
                last_error_at=row["last_error_at"],
            )
            for row in rows
        ]

    async def turn_figures(self, since: datetime, until: datetime) -> TurnFigures:
        async with self._connection() as conn:
            turns = await conn.fetchrow(QUERIES["overview_turns"], since, until)
            first = await conn.fetchrow(QUERIES["overview_first_token"], since, until)
        assert turns is not None and first is not None
        return TurnFigures(
            turns=turns["turns"],
            errors=turns["errors"],
            p50_ms=turns["p50_ms"],
            p95_ms=turns["p95_ms"],
            first_token_p50_ms=first["p50_ms"],
            first_token_p95_ms=first["p95_ms"],
        )

    async def token_usage(self, since: datetime, until: datetime) -> list[TokenUsage]:
        async with self._connection() as conn:
            rows = await conn.fetch(QUERIES["overview_tokens"], since, until)
        return [
            TokenUsage(
                model=row["model"],
                agent_id=row["agent_id"],
                calls=row["calls"],
                input_tokens=int(row["input_tokens"]),
                output_tokens=int(row["output_tokens"]),
                cached_input_tokens=int(row["cached_input_tokens"]),
                cost_usd=row["cost_usd"],
            )
            for row in rows
        ]

    async def turn_series(self, since: datetime, until: datetime, bucket_s: float) -> list[TurnBucket]:
        async with self._connection() as conn:
            rows = await conn.fetch(QUERIES["overview_series"], since, until, bucket_s)
        return [
            TurnBucket(
                started_at=row["bucket"],
                turns=row["turns"],
                errors=row["errors"],
                p50_ms=row["p50_ms"],
                p95_ms=row["p95_ms"],
            )
            for row in rows
        ]

    async def traces(self, where: TraceFilter) -> list[TraceSummary]:
        before_at, before_id = where.before if where.before is not None else (None, None)
        async with self._connection() as conn:
            rows = await conn.fetch(
                QUERIES["list_traces"],
                where.since,
                where.until,
                where.session_id,
                where.agent_id,
                where.failed,
                before_at,
                before_id,
                where.limit,
            )
        return [
            TraceSummary(
                trace_id=row["trace_id"],
                root_name=row["root_name"],
                started_at=row["started_at"],
                ended_at=row["ended_at"],
                span_count=row["span_count"],
                failed=row["failed"],
                session_id=row["session_id"],
                agents=tuple(sorted(row["agents"])),
                services=tuple(sorted(row["services"])),
            )
            for row in rows
        ]

    async def trace_spans(self, trace_id: str) -> list[StoredSpan]:
        async with self._connection() as conn:
            rows = await conn.fetch(QUERIES["trace_spans"], trace_id, MAX_TRACE_SPANS)
        return [
            StoredSpan(
                trace_id=row["trace_id"],
                span_id=row["span_id"],
                parent_span_id=row["parent_span_id"],
                name=row["name"],
                kind=row["kind"],
                service=row["service"],
                started_at=row["started_at"],
                ended_at=row["ended_at"],
                duration_ms=row["duration_ms"],
                status=row["status"],
                status_message=row["status_message"],
                attributes=_json(row["attributes"]),
            )
            for row in rows
        ]

    async def logs(self, where: LogFilter) -> list[StoredLog]:
        levels = list(LOG_LEVELS[LOG_LEVELS.index(where.min_level) :]) if where.min_level else None
        async with self._connection() as conn:
            rows = await conn.fetch(
                QUERIES["list_logs"],
                where.since,
                where.until,
                where.service,
                levels,
                where.trace_id,
                where.before_id,
                where.limit,
            )
        return [
            StoredLog(
                id=row["id"],
                logged_at=row["logged_at"],
                level=row["level"],
                service=row["service"],
                logger=row["logger"],
                message=row["message"],
                trace_id=row["trace_id"],
                span_id=row["span_id"],
                attributes=_json(row["attributes"]),
            )
            for row in rows
        ]

    async def add_feedback(
        self,
        *,
        feedback_id: str,
        rating: str,
        comment: str,
        session_id: str,
        message_id: str | None,
        turn_id: str | None,
        trace_id: str,
    ) -> Feedback:
        async with self._connection() as conn:
            row = await conn.fetchrow(
                QUERIES["insert_feedback"], feedback_id, rating, comment, session_id, message_id, turn_id, trace_id
            )
        assert row is not None
        return _feedback(row)

    async def remove_feedback(self, feedback_id: str) -> None:
        async with self._connection() as conn:
            await conn.execute(QUERIES["delete_feedback"], feedback_id)

    async def feedback(self, where: FeedbackFilter) -> list[Feedback]:
        before_at, before_id = where.before if where.before is not None else (None, None)
        async with self._connection() as conn:
            rows = await conn.fetch(
                QUERIES["list_feedback"],
                where.since,
                where.until,
                where.session_id,
                where.rating,
                where.trace_id,
                before_at,
                before_id,
                where.limit,
            )
        return [_feedback(row) for row in rows]


def _feedback(row: asyncpg.Record) -> Feedback:
    return Feedback(
        id=row["id"],
        created_at=row["created_at"],
        rating=row["rating"],
        comment=row["comment"],
        session_id=row["session_id"],
        message_id=row["message_id"],
        turn_id=row["turn_id"],
        trace_id=row["trace_id"],
    )
