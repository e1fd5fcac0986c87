"""Chat turns as records (popagent_turns): status, the runner that runs each and its lease.

A turn is `running` from its start until it ends `completed`, `failed`, `cancelled` or
`interrupted`. At most one turn runs on a session (a partial unique index), whichever
agent-runner runs it. The runner renews the leases of the turns it runs (`keep_leases`); a
turn whose lease passed has lost its runner, so followers stop waiting for it and the next
turn on its session marks it interrupted, unless a runner takes it over first (`take_over_lost`).
A runner's id is its name (host and gRPC port), so a runner that restarts lets go of what it was
running before at once (`release_own`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Collection
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, get_args

import asyncpg
import orjson
from asyncpg.pool import PoolConnectionProxy

from popagent_core.db import load_queries, record_of, wrap_db_errors
from popagent_core.errors import AlreadyExists, NotFound, PopagentError

logger = logging.getLogger(__name__)

QUERIES = load_queries(Path(__file__).with_name("records.sql"))

TurnStatus = Literal["queued", "running", "completed", "failed", "cancelled", "interrupted"]
TURN_STATUSES: frozenset[str] = frozenset(get_args(TurnStatus))


@dataclass(frozen=True)
class TurnRecord:
    id: str
    session_id: str
    status: TurnStatus
    runner_id: str
    # The runner's lease is still valid (a running turn whose lease passed has lost its runner).
    leased: bool = True
    # A background task's attempt: the task it runs (None: a chat turn).
    task_id: str | None = None


@dataclass(frozen=True)
class QueuedTurn:
    """A turn to run from its stored request: a queued one, or one taken over from a lost runner."""

    id: str
    session_id: str
    # What it runs: the user UI message as the gateway passed it on, the model, workspace and trace.
    request: dict[str, Any]
    # None for a running turn taken over.
    queued_at: datetime | None
    # How far a turn taken over got (its stored messages and UI message); None: from its prompt.
    progress: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class CompletedTaskTurn:
    turn_id: str
    outcome: str


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

    async def start(
        self, turn_id: str, session_id: str, *, task_id: str | None = None, request: dict[str, Any] | None = None
    ) -> bool:
        """Record the turn as running on this runner, with what it runs (`request`: another runner can
        take it over); False when a turn already runs or waits on the session. A running turn whose
        runner lost its lease ends as interrupted first."""
        values = (
            turn_id,
            session_id,
            self.runner_id,
            self.lease_s,
            task_id,
            orjson.dumps(request).decode() if request is not None else None,
        )
        return await self._start("start", session_id, values)

    async def start_task(self, turn_id: str, session_id: str, task_id: str, *, after_completed: bool) -> bool:
        """`start` for a task attempt's turn; with `after_completed`, also False when an earlier
        attempt's turn of the task completed with its answer (`completed_task` reads it)."""
        values = (turn_id, session_id, self.runner_id, self.lease_s, task_id, after_completed)
        return await self._start("start_task", session_id, values)

    async def _start(self, query: str, session_id: str, values: tuple[Any, ...]) -> bool:
        with wrap_db_errors():
            if await self.pool.fetchval(QUERIES[query], *values):
                return True
        async with self._unflushed() as conn:
            await conn.execute(QUERIES["expire_running"], session_id)
            return bool(await conn.fetchval(QUERIES[query], *values))

    async def completed_task(self, task_id: str) -> CompletedTaskTurn | None:
        """The turn of an earlier attempt of the task that completed, with its answer; None: none did."""
        with wrap_db_errors():
            row = await self.pool.fetchrow(QUERIES["completed_task"], task_id)
        return CompletedTaskTurn(row["id"], row["task_outcome"]) if row is not None else None

    async def running(self, session_id: str) -> TurnRecord | None:
        """The session's running turn, if its runner holds the lease; NotFound for an unknown session."""
        with wrap_db_errors():
            row = await self.pool.fetchrow(QUERIES["running"], session_id)
        if row is None:
            raise NotFound(f"session {session_id!r} not found")
        return record_of(TurnRecord, row) if row["id"] is not None else None

    async def following(self, session_id: str) -> TurnRecord | None:
        """The session's running turn, its lease valid or not (`leased` says); NotFound for an unknown session."""
        with wrap_db_errors():
            row = await self.pool.fetchrow(QUERIES["following"], session_id)
        if row is None:
            raise NotFound(f"session {session_id!r} not found")
        return record_of(TurnRecord, row) if row["id"] is not None else None

    async def release_running(self, turn_ids: Collection[str]) -> None:
        """This runner stops: its running turns are for another runner to take over at once."""
        async with self._unflushed() as conn:
            await conn.execute(QUERIES["release_running"], list(turn_ids), self.runner_id)

    async def running_for_message(self, session_id: str, message_id: str) -> str | None:
        """The id of the session's running turn whose prompt is `message_id`; None: no such turn runs."""
        with wrap_db_errors():
            return await self.pool.fetchval(QUERIES["running_for_message"], session_id, message_id)

    async def get(self, session_id: str, turn_id: str) -> TurnRecord | None:
        with wrap_db_errors():
            row = await self.pool.fetchrow(QUERIES["get"], turn_id, session_id)
        return record_of(TurnRecord, row) if row is not None else None

    async def finish(self, turn_id: str, status: TurnStatus, *, task_outcome: str | None = None) -> None:
        """The turn's final status; a task attempt's completed turn keeps its answer (`task_outcome`)."""
        async with self._unflushed() as conn:
            await conn.execute(QUERIES["finish"], turn_id, self.runner_id, status, task_outcome)

    async def queue(self, turn_id: str, session_id: str, request: dict[str, Any]) -> int:
        """Record the turn as queued on the session, held by this runner; how many turns are ahead of it."""
        async with self._unflushed() as conn:
            ahead = await conn.fetchval(
                QUERIES["queue"], turn_id, session_id, self.runner_id, self.lease_s, orjson.dumps(request).decode()
            )
        return int(ahead)

    async def start_queued(self, turn_id: str, session_id: str) -> bool:
        """The queued turn runs now if its time has come (the oldest queued and none running); a
        running turn whose runner lost its lease ends as interrupted first."""
        for attempt in range(2):
            try:
                async with self._unflushed() as conn:
                    if attempt:
                        await conn.execute(QUERIES["expire_running"], session_id)
                    return bool(await conn.fetchval(QUERIES["start_queued"], turn_id, self.runner_id, self.lease_s))
            except AlreadyExists:
                continue  # a turn runs on the session (or ran on a runner that is gone)
        return False

    async def cancel_queued(self, turn_id: str, session_id: str) -> bool:
        """A queued turn that will not run (cancelled, or its caller left with continueOnDisconnect off)."""
        async with self._unflushed() as conn:
            return await conn.fetchval(QUERIES["cancel_queued"], turn_id, session_id) is not None

    async def adopt_queued(self, waiting: Collection[str]) -> list[QueuedTurn]:
        """Queued turns whose runner died (or this runner before it restarted) are this runner's to run,
        except those in `waiting` (it waits with them already)."""
        async with self._unflushed() as conn:
            rows = await conn.fetch(QUERIES["adopt_queued"], self.runner_id, self.lease_s, list(waiting))
        return [_queued(row) for row in rows]

    async def release_queued(self, turn_ids: Collection[str]) -> None:
        """This runner stops: the queued turns it waited with are for other runners to adopt at once."""
        async with self._unflushed() as conn:
            await conn.execute(QUERIES["release_queued"], self.runner_id, list(turn_ids))

    async def queued(self, session_id: str) -> list[QueuedTurn]:
        """The session's queued turns, oldest first."""
        with wrap_db_errors():
            rows = await self.pool.fetch(QUERIES["queued_turns"], session_id)
        return [_queued(row) for row in rows]

    async def progress(self, turn_id: str, progress: dict[str, Any]) -> None:
        """Store how far the turn got (another runner goes on from there if this one dies)."""
        async with self._unflushed() as conn:
            await conn.execute(QUERIES["progress"], turn_id, self.runner_id, orjson.dumps(progress).decode())

    async def take_over_lost(self, max_attempts: int) -> list[QueuedTurn]:
        """Turns whose runner died, now this runner's to go on with; lost turns that cannot be
        taken over (task turns, too many attempts) end as interrupted."""
        async with self._unflushed() as conn:
            ended = await conn.fetch(QUERIES["end_lost"], max_attempts)
            rows = await conn.fetch(QUERIES["take_over_lost"], self.runner_id, self.lease_s, max_attempts)
        if ended:
            logger.info("turns whose runner was lost ended as interrupted", extra={"turns": [r["id"] for r in ended]})
        return [_queued(row) for row in rows]

    async def release_own(self) -> list[str]:
        """At start: the turns this runner was running when it last stopped are lost, to be taken over now."""
        with wrap_db_errors():
            return [row["id"] for row in await self.pool.fetch(QUERIES["release_runner"], self.runner_id)]

    async def keep_leases(self, running: Callable[[], Collection[str]]) -> None:
        """Renew the leases of this runner's running and queued turns, three times per lease, until cancelled.
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


def _queued(row: asyncpg.Record) -> QueuedTurn:
    progress = row.get("progress")
    return QueuedTurn(
        row["id"],
        row["session_id"],
        orjson.loads(row["request"]),
        row["queued_at"],
        orjson.loads(progress) if progress is not None else None,
    )
