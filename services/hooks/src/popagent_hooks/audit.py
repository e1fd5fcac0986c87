"""Audit of hook decisions in `popagent_hook_runs`: repository, background writer, retention.

Dispatch never waits for the database: records go to a bounded in-memory queue and a
background writer persists them in batches. A failed write is logged and dropped, so an
audit outage can never change a decision or its failure mode. After every write, and
once a day, rows older than 30 days go and each session keeps its newest 500.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import asyncpg

from popagent_core.db import load_queries, wrap_db_errors
from popagent_hooks_client.events import Event, FailureClass, Outcome

logger = logging.getLogger(__name__)

QUERIES = load_queries(Path(__file__).parent / "queries.sql")
RETENTION_DAYS = 30
SESSION_CAP = 500
MAINTENANCE_INTERVAL_S = 24 * 3600.0


@dataclass(frozen=True)
class HookRun:
    """One audit row: who decided what, how long it took, and why; never the payload.

    The dispatcher makes one per handler that ran, the writer stores it, and the
    repository reads it back (as a `StoredRun`). Empty ids are stored as NULL.
    """

    event: Event
    handler_id: str
    outcome: Outcome
    # None when the handler answered validly.
    failure_class: FailureClass | None
    duration_ms: int
    session_id: str
    turn_id: str
    tool_call_id: str
    target: str
    event_id: str
    reason: str
    created_at: datetime
    # Whether the request carried a `webhook-signature` (the handler has a secret).
    signed: bool


@dataclass(frozen=True)
class StoredRun:
    """A persisted `HookRun` with the id the database gave it."""

    id: int
    run: HookRun


def _or_none(value: str) -> str | None:
    return value or None


def _stored_run(row: asyncpg.Record) -> StoredRun:
    return StoredRun(
        id=row["id"],
        run=HookRun(
            event=Event(row["event"]),
            handler_id=row["handler_id"],
            outcome=Outcome(row["outcome"]),
            failure_class=FailureClass(row["failure_class"]) if row["failure_class"] else None,
            duration_ms=row["duration_ms"],
            session_id=row["session_id"] or "",
            turn_id=row["turn_id"] or "",
            tool_call_id=row["tool_call_id"] or "",
            target=row["target"] or "",
            event_id=row["event_id"],
            reason=row["reason"],
            created_at=row["created_at"],
            signed=row["signed"],
        ),
    )


class AuditRepo:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def write(self, records: Sequence[HookRun]) -> None:
        """Insert `records`, then apply retention to the sessions they belong to."""
        sessions = sorted({r.session_id for r in records if r.session_id})
        columns = (
            [r.event.value for r in records],
            [r.handler_id for r in records],
            [r.outcome.value for r in records],
            [r.failure_class.value if r.failure_class else None for r in records],
            [r.duration_ms for r in records],
            [_or_none(r.session_id) for r in records],
            [_or_none(r.turn_id) for r in records],
            [_or_none(r.tool_call_id) for r in records],
            [_or_none(r.target) for r in records],
            [r.event_id for r in records],
            [r.reason for r in records],
            [r.created_at for r in records],
            [r.signed for r in records],
        )
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                await conn.execute(QUERIES["insert_runs"], *columns)
                await conn.execute(QUERIES["delete_expired"], RETENTION_DAYS)
                if sessions:
                    await conn.execute(QUERIES["cap_sessions"], sessions, SESSION_CAP)

    async def maintain(self) -> tuple[int, int]:
        """The daily global pass: (expired rows removed, rows over a session cap removed)."""
        with wrap_db_errors():
            expired = await self.pool.execute(QUERIES["delete_expired"], RETENTION_DAYS)
            capped = await self.pool.execute(QUERIES["cap_all_sessions"], SESSION_CAP)
        return _count(expired), _count(capped)

    async def list_session(self, session_id: str, limit: int = SESSION_CAP) -> list[StoredRun]:
        with wrap_db_errors():
            rows = await self.pool.fetch(QUERIES["list_session_runs"], session_id, limit)
        return [_stored_run(row) for row in rows]

    async def delete_session(self, session_id: str) -> int:
        with wrap_db_errors():
            return _count(await self.pool.execute(QUERIES["delete_session_runs"], session_id))


def _count(status: str) -> int:
    """Row count of an asyncpg command status such as `DELETE 3`."""
    return int(status.rsplit(" ", 1)[-1])


class AuditWriter:
    """Persists records in the background; `submit` never blocks and never raises."""

    def __init__(self, repo: AuditRepo, *, max_pending: int = 10_000, batch_size: int = 500) -> None:
        self.repo = repo
        self.batch_size = batch_size
        self._queue: asyncio.Queue[list[HookRun]] = asyncio.Queue(maxsize=max_pending)

    def submit(self, records: list[HookRun]) -> None:
        if not records:
            return
        try:
            self._queue.put_nowait(records)
        except asyncio.QueueFull:
            logger.error("hook audit queue full; records dropped", extra={"records": len(records)})

    async def flush(self) -> None:
        """Wait until everything submitted so far was written (or its failure logged)."""
        await self._queue.join()

    async def run(self) -> None:
        while True:
            items = [await self._queue.get()]
            size = len(items[0])
            while size < self.batch_size and not self._queue.empty():
                items.append(self._queue.get_nowait())
                size += len(items[-1])
            try:
                await self.repo.write([record for item in items for record in item])
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.error("hook audit write failed", extra={"records": size, "error": type(exc).__name__})
            finally:
                for _ in items:
                    self._queue.task_done()

    async def drain(self, timeout_s: float = 3.0) -> None:
        """Best effort at shutdown: write what is queued, within `timeout_s`."""
        try:
            async with asyncio.timeout(timeout_s):
                await self.flush()
        except TimeoutError:
            logger.warning("hook audit records not written at shutdown", extra={"pending": self._queue.qsize()})


async def delete_session_runs(repo: AuditRepo, writer: AuditWriter, session_id: str) -> int:
    """Remove a permanently deleted session's audit rows, including rows still queued."""
    await writer.flush()
    return await repo.delete_session(session_id)


async def maintenance_loop(repo: AuditRepo, interval_s: float = MAINTENANCE_INTERVAL_S) -> None:
    """The daily retention job: one pass at start, then one every `interval_s`."""
    while True:
        try:
            expired, capped = await repo.maintain()
            logger.info("hook audit maintenance", extra={"expired": expired, "capped": capped})
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.error("hook audit maintenance failed", extra={"error": type(exc).__name__})
        await asyncio.sleep(interval_s)
