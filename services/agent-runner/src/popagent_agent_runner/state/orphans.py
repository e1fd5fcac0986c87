"""Rows a crash or a bug can leave behind, found and removed (`python -m popagent_agent_runner repair`).

A session's deletion removes its row, its thread and its turns, approvals and grants in one
transaction, and a half-done deletion is finished by `SessionDeleter.resume_pending`; so these
rows come only from a database restored from a partial backup, edited by hand, or a defect:

- chat threads whose session row is gone (their messages, observational state and specialist
  threads go with them, by cascade);
- turn records, approvals and session grants of sessions that no longer exist.

Nothing younger than `older_than_s` is touched: a session, thread or turn being created now.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import asyncpg

from popagent_core.db import load_queries, wrap_db_errors

QUERIES = load_queries(Path(__file__).parent / "orphans.sql")
# Rows younger than this are left alone by default.
DEFAULT_OLDER_THAN_S = 300.0


@dataclass
class Orphans:
    """What one pass found (ids of each kind; a grant is its session id)."""

    threads: list[str] = field(default_factory=list[str])
    turns: list[str] = field(default_factory=list[str])
    approvals: list[str] = field(default_factory=list[str])
    grant_sessions: list[str] = field(default_factory=list[str])

    @property
    def empty(self) -> bool:
        return not (self.threads or self.turns or self.approvals or self.grant_sessions)


class OrphanRepair:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def find(self, older_than_s: float, *, chat_resource: str) -> Orphans:
        """`chat_resource`: the resource id of every chat thread (`memory.threads.USER_RESOURCE`)."""
        with wrap_db_errors():
            threads = await self.pool.fetch(QUERIES["orphan_threads"], chat_resource, older_than_s)
            turns = await self.pool.fetch(QUERIES["orphan_turns"], older_than_s)
            approvals = await self.pool.fetch(QUERIES["orphan_approvals"], older_than_s)
            grants = await self.pool.fetch(QUERIES["orphan_grants"], older_than_s)
        return Orphans(
            threads=[row["id"] for row in threads],
            turns=[row["id"] for row in turns],
            approvals=[row["id"] for row in approvals],
            grant_sessions=sorted({row["session_id"] for row in grants}),
        )

    async def sweep(self, *, chat_resource: str, older_than_s: float = DEFAULT_OLDER_THAN_S) -> Orphans:
        """Find and remove in one go (agent-runner does this at start); what was found."""
        found = await self.find(older_than_s, chat_resource=chat_resource)
        if not found.empty:
            await self.remove(found)
        return found

    async def remove(self, found: Orphans) -> None:
        """Delete what `find` found, in one transaction; a row that meanwhile got its session back stays."""
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                await conn.execute(QUERIES["delete_orphan_threads"], found.threads)
                await conn.execute(QUERIES["delete_orphan_turns"], found.turns)
                await conn.execute(QUERIES["delete_orphan_approvals"], found.approvals)
                await conn.execute(QUERIES["delete_orphan_grants"], found.grant_sessions)
