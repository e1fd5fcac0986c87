"""Reads of the observability store for /api/observability, each row read into its wire record (`dto.observability`).

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
from popagent_gateway.dto.observability import (
    FeedbackOut,
    LogOut,
    ProcessExporterOut,
    SpanOut,
    TokenUsageOut,
    TraceSummaryOut,
    TurnBucketOut,
)

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
    # Only traces of a turn; `failed` is then the turn's own status.
    turns_only: bool = False
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

    async def exporters(self, seen_within_s: float, stale_after_s: float) -> list[ProcessExporterOut]:
        """The heartbeat rows of the processes that wrote one in the last `seen_within_s`; stale: none for
        `stale_after_s`."""
        async with self._connection() as conn:
            rows = await conn.fetch(QUERIES["list_exporters"], seen_within_s, stale_after_s)
        return [ProcessExporterOut.model_validate(dict(row)) for row in rows]

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

    async def token_usage(self, since: datetime, until: datetime) -> list[TokenUsageOut]:
        async with self._connection() as conn:
            rows = await conn.fetch(QUERIES["overview_tokens"], since, until)
        return [TokenUsageOut.model_validate(dict(row)) for row in rows]

    async def turn_series(self, since: datetime, until: datetime, bucket_s: float) -> list[TurnBucketOut]:
        async with self._connection() as conn:
            rows = await conn.fetch(QUERIES["overview_series"], since, until, bucket_s)
        return [TurnBucketOut.model_validate(dict(row)) for row in rows]

    async def traces(self, where: TraceFilter) -> list[TraceSummaryOut]:
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
                where.turns_only,
            )
        return [
            TraceSummaryOut.model_validate(
                dict(
                    row,
                    duration_ms=(row["ended_at"] - row["started_at"]).total_seconds() * 1000,
                    status="error" if row["failed"] else "ok",
                    turn_status=None if not row["turn"] else "error" if row["turn_failed"] else "ok",
                    agents=sorted(row["agents"]),
                    services=sorted(row["services"]),
                )
            )
            for row in rows
        ]

    async def trace_spans(self, trace_id: str) -> list[SpanOut]:
        """The trace's spans in start order, each without children yet (`span_tree` links them)."""
        async with self._connection() as conn:
            rows = await conn.fetch(QUERIES["trace_spans"], trace_id, MAX_TRACE_SPANS)
        return [SpanOut.model_validate(dict(row, attributes=_json(row["attributes"]), children=[])) for row in rows]

    async def logs(self, where: LogFilter) -> list[LogOut]:
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
        return [LogOut.model_validate(dict(row, attributes=_json(row["attributes"]))) for row in rows]

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
    ) -> FeedbackOut:
        async with self._connection() as conn:
            row = await conn.fetchrow(
                QUERIES["insert_feedback"], feedback_id, rating, comment, session_id, message_id, turn_id, trace_id
            )
        assert row is not None
        return FeedbackOut.model_validate(dict(row))

    async def remove_feedback(self, feedback_id: str) -> None:
        async with self._connection() as conn:
            await conn.execute(QUERIES["delete_feedback"], feedback_id)

    async def feedback(self, where: FeedbackFilter) -> list[FeedbackOut]:
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
        return [FeedbackOut.model_validate(dict(row)) for row in rows]
