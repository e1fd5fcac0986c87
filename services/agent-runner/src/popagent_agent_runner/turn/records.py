"""Chat turns as records (popagent_turns): status, the runner that runs each and its lease.

A turn is `running` from its start until it ends `completed`, `failed`, `cancelled` or
`interrupted`. At most one turn runs on a session (a partial unique index), whichever
agent-runner runs it. The runner renews the leases of the turns it runs (`keep_leases`); a
turn whose lease passed has lost its runner, so followers stop waiting for it and the next
turn on its session marks it interrupted. A runner's id is its name (host and gRPC port), so a
runner that restarts ends what it was running before (`interrupt_own`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from popagent_core.db import load_queries, record_of, wrap_db_errors
from popagent_core.errors import NotFound, PopagentError

logger = logging.getLogger(__name__)

QUERIES = load_queries(Path(__file__).with_name("records.sql"))

TurnStatus = Literal["running", "completed", "failed", "cancelled", "interrupted"]


@dataclass(frozen=True)
class TurnRecord:
    id: str
    session_id: str
    status: TurnStatus
    runner_id: str
    # The runner's lease is still valid (a running turn whose lease passed has lost its runner).
    leased: bool = True


class TurnRecords:
    def __init__(self, pool: asyncpg.Pool, *, runner_id: str, lease_s: float) -> None:
        self.pool = pool
        self.runner_id = runner_id
        self.lease_s = lease_s

    @contextlib.asynccontextmanager
    async def _unflushed(self) -> AsyncIterator[PoolConnectionProxy]:
        """A transaction whose commit does not wait for the WAL flush (`synchronous_commit = off`).
        A turn's record is its lease, not its answer (stored durably on its own), so a database crash
        may lose its last few changes; meanwhile a turn's first event does not wait for a disk flush."""
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                await conn.execute("SET LOCAL synchronous_commit = off")
                yield conn

    async def start(self, turn_id: str, session_id: str) -> bool:
        """Record the turn as running on this runner; False when a turn already runs on the session.
        A running turn whose runner lost its lease ends as interrupted first."""
        async with self._unflushed() as conn:
            if await conn.fetchval(QUERIES["start"], turn_id, session_id, self.runner_id, self.lease_s):
                return True
        async with self._unflushed() as conn:
            await conn.execute(QUERIES["expire_running"], session_id)
            return bool(await conn.fetchval(QUERIES["start"], turn_id, session_id, self.runner_id, self.lease_s))

    async def running(self, session_id: str) -> TurnRecord | None:
        """The session's running turn, if its runner holds the lease; NotFound for an unknown session."""
        with wrap_db_errors():
            row = await self.pool.fetchrow(QUERIES["running"], session_id)
        if row is None:
            raise NotFound(f"session {session_id!r} not found")
        return record_of(TurnRecord, row) if row["id"] is not None else None

    async def get(self, session_id: str, turn_id: str) -> TurnRecord | None:
        with wrap_db_errors():
            row = await self.pool.fetchrow(QUERIES["get"], turn_id, session_id)
        return record_of(TurnRecord, row) if row is not None else None

    async def finish(self, turn_id: str, status: TurnStatus) -> None:
        async with self._unflushed() as conn:
            await conn.execute(QUERIES["finish"], turn_id, self.runner_id, status)

    async def interrupt_own(self) -> list[str]:
        """At start: the turns this runner was running when it last stopped end as interrupted."""
        with wrap_db_errors():
            return [row["id"] for row in await self.pool.fetch(QUERIES["interrupt_runner"], self.runner_id)]

    async def keep_leases(self, running: Callable[[], Collection[str]]) -> None:
        """Renew the leases of this runner's running turns, three times per lease, until cancelled.
        A database outage is retried at the next renewal; a lease that passes meanwhile is lost."""
        while True:
            await asyncio.sleep(self.lease_s / 3)
            turn_ids = list(running())
            if not turn_ids:
                continue
            try:
                async with self._unflushed() as conn:
                    await conn.fetch(QUERIES["renew"], turn_ids, self.runner_id, self.lease_s)
            except PopagentError as exc:
                logger.warning("turn leases not renewed", extra={"turns": len(turn_ids), "error": str(exc)})
