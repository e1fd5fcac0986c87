"""Evolution signals (popagent_evolution_signals): ingest, claim, settle, and the user's ignore and retry;
and every agent run's outcome (popagent_evolution_outcomes), counted so a reflection sees the agent's rate.

A signal is one failure of one agent in one trace, with bounded, redacted Goal/Failure
evidence. Workers claim due signals with `FOR UPDATE SKIP LOCKED`; the attempt number is
the claim's fencing token, so an attempt that lost its claim (recovered as abandoned)
settles nothing.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from popagent_core.db import load_queries, record_of, wrap_db_errors
from popagent_core.errors import Conflict, NotFound

QUERIES = load_queries(Path(__file__).parent / "queries.sql")
STATUSES = ("pending", "claimed", "applied", "dismissed", "ignored", "dead_letter")
MAX_LIST = 200
# How far back an agent's outcome rate looks; older outcomes are deleted.
OUTCOME_WINDOW_DAYS = 7

Conn = asyncpg.Connection | PoolConnectionProxy


@dataclass(frozen=True, slots=True)
class NewSignal:
    event_id: str
    trace_id: str
    turn_id: str
    session_id: str
    agent_id: str
    failure_class: str
    goal: str
    evidence: str


@dataclass(frozen=True, slots=True)
class Outcome:
    """One agent run's outcome as its event arrived."""

    event_id: str
    agent_id: str
    succeeded: bool


@dataclass(frozen=True, slots=True)
class OutcomeRate:
    """An agent's outcomes over the last `days` days."""

    succeeded: int
    failed: int
    days: int


@dataclass(frozen=True, slots=True)
class SignalRecord(NewSignal):
    """A stored signal: what ingestion gave, and its claim and settlement state."""

    id: str
    status: str
    attempts: int
    max_attempts: int
    due_at: datetime
    last_error: str
    created_at: datetime
    updated_at: datetime


def signal_of(row: asyncpg.Record) -> SignalRecord:
    return record_of(SignalRecord, row, id=str(row["id"]))


def fences(signals: list[SignalRecord]) -> tuple[list[uuid.UUID], list[int]]:
    """The ids and attempt numbers of claimed signals, as the settle queries take them."""
    return [uuid.UUID(s.id) for s in signals], [s.attempts for s in signals]


class SignalRepo:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def ingest_many(self, signals: list[NewSignal], *, max_attempts: int, delay_s: float) -> int:
        """Store a batch in one statement (each unless its trace, agent and class exists); how many were new."""
        if not signals:
            return 0
        columns = [
            [uuid.uuid4() for _ in signals],
            *(
                [getattr(s, name) for s in signals]
                for name in (
                    "event_id",
                    "trace_id",
                    "turn_id",
                    "session_id",
                    "agent_id",
                    "failure_class",
                    "goal",
                    "evidence",
                )
            ),
        ]
        with wrap_db_errors():
            rows = await self.pool.fetch(QUERIES["insert_signals"], *columns, max_attempts, delay_s)
        return len(rows)

    async def record_outcomes(self, outcomes: list[Outcome]) -> None:
        if not outcomes:
            return
        with wrap_db_errors():
            await self.pool.execute(
                QUERIES["insert_outcomes"],
                [o.event_id for o in outcomes],
                [o.agent_id for o in outcomes],
                [o.succeeded for o in outcomes],
            )

    async def outcome_rate(self, agent_id: str) -> OutcomeRate:
        with wrap_db_errors():
            row = await self.pool.fetchrow(QUERIES["outcome_rate"], agent_id, OUTCOME_WINDOW_DAYS)
        assert row is not None
        return OutcomeRate(succeeded=row["succeeded"], failed=row["failed"], days=OUTCOME_WINDOW_DAYS)

    async def prune_outcomes(self) -> None:
        with wrap_db_errors():
            await self.pool.execute(QUERIES["prune_outcomes"], OUTCOME_WINDOW_DAYS)

    async def recover_abandoned(self, claim_timeout_s: float) -> int:
        with wrap_db_errors():
            return len(await self.pool.fetch(QUERIES["recover_abandoned_claims"], claim_timeout_s))

    async def claim(self, limit: int, worker: str) -> list[SignalRecord]:
        with wrap_db_errors():
            return [signal_of(row) for row in await self.pool.fetch(QUERIES["claim_signals"], limit, worker)]

    async def fail(self, signals: list[SignalRecord], error: str, *, base_s: float, cap_s: float) -> dict[str, str]:
        """Release a failed attempt (backoff, or dead letter); signal id -> its new status."""
        ids, attempts = fences(signals)
        with wrap_db_errors():
            rows = await self.pool.fetch(QUERIES["fail_claimed_signals"], ids, attempts, base_s, cap_s, error)
        return {str(row["id"]): row["status"] for row in rows}

    async def settle(self, conn: Conn, signals: list[SignalRecord], status: str, note: str = "") -> int:
        """End this attempt's claim on `signals` inside the caller's transaction."""
        ids, attempts = fences(signals)
        return len(await conn.fetch(QUERIES["settle_claimed_signals"], ids, attempts, status, note))

    async def settle_now(self, signals: list[SignalRecord], status: str, note: str = "") -> int:
        with wrap_db_errors():
            async with self.pool.acquire() as conn:
                return await self.settle(conn, signals, status, note)

    async def list(self, *, status: str | None, agent_id: str | None, limit: int) -> list[SignalRecord]:
        with wrap_db_errors():
            rows = await self.pool.fetch(QUERIES["list_signals"], status, agent_id, min(limit, MAX_LIST))
        return [signal_of(row) for row in rows]

    async def ignore(self, signal_id: str) -> SignalRecord:
        return await self._transition(signal_id, "ignore_signal", "only a pending or dead-letter signal can be ignored")

    async def retry(self, signal_id: str) -> SignalRecord:
        return await self._transition(signal_id, "retry_signal", "only a dead-letter signal can be retried")

    async def _transition(self, signal_id: str, query: str, refusal: str) -> SignalRecord:
        key = _uuid(signal_id)
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                row = await conn.fetchrow(QUERIES[query], key)
                if row is None:
                    status = await conn.fetchval(QUERIES["signal_status"], key)
                    if status is None:
                        raise NotFound(f"signal {signal_id!r} not found")
                    raise Conflict(f"{refusal}; this one is {status}")
        return signal_of(row)


def _uuid(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise NotFound(f"signal {value!r} not found") from None
