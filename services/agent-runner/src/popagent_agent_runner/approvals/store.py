"""Approvals and session grants as records (popagent_approvals, popagent_approval_grants)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import asyncpg
import orjson

from popagent_core.db import load_queries, record_of, wrap_db_errors
from popagent_core.errors import FailedPrecondition, NotFound

QUERIES = load_queries(Path(__file__).with_name("store.sql"))

ApprovalState = Literal["pending", "approved", "denied", "expired"]
Scope = Literal["once", "session"]


@dataclass(frozen=True)
class Approval:
    id: str
    session_id: str
    turn_id: str
    tool_call_id: str
    agent_id: str
    tool_name: str
    # Redacted as in hook payloads.
    arguments: dict[str, Any]
    reason: str
    # "policy" or "hook:<handler id>".
    asked_by: str
    state: ApprovalState
    scope: Scope | None
    answered_by: str | None
    answer_reason: str | None
    created_at: datetime
    answered_at: datetime | None
    expires_at: datetime
    # "not_started", "started" (claimed by a runner) or "finished" (`outcome` stored).
    execution: str
    outcome: dict[str, Any] | None


@dataclass(frozen=True)
class Grant:
    session_id: str
    tool_name: str
    granted_by: str
    approval_id: str
    created_at: datetime


def _approval(row: asyncpg.Record) -> Approval:
    outcome = row["outcome"]
    return record_of(
        Approval,
        row,
        arguments=orjson.loads(row["arguments"]),
        outcome=orjson.loads(outcome) if outcome is not None else None,
    )


class ApprovalStore:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def ask(
        self,
        *,
        approval_id: str,
        session_id: str,
        turn_id: str,
        tool_call_id: str,
        agent_id: str,
        tool_name: str,
        arguments: dict[str, Any],
        reason: str,
        asked_by: str,
        expires_in_s: float,
    ) -> Approval:
        """The call's approval: a new pending one, or the one it asked before (a turn taken over)."""
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                await conn.execute(
                    QUERIES["ask"],
                    approval_id,
                    session_id,
                    turn_id,
                    tool_call_id,
                    agent_id,
                    tool_name,
                    orjson.dumps(arguments).decode(),
                    reason,
                    asked_by,
                    expires_in_s,
                )
                row = await conn.fetchrow(QUERIES["for_call"], turn_id, tool_call_id)
        return _approval(row)

    async def for_call(self, turn_id: str, tool_call_id: str) -> Approval | None:
        with wrap_db_errors():
            row = await self.pool.fetchrow(QUERIES["for_call"], turn_id, tool_call_id)
        return _approval(row) if row is not None else None

    async def get(self, approval_id: str) -> Approval:
        with wrap_db_errors():
            row = await self.pool.fetchrow(QUERIES["get"], approval_id)
        if row is None:
            raise NotFound(f"approval {approval_id!r} not found")
        return _approval(row)

    async def expire(self, approval_id: str) -> Approval | None:
        """The approval marked expired if it was pending past its time; None otherwise."""
        with wrap_db_errors():
            row = await self.pool.fetchrow(QUERIES["expire"], approval_id)
        return _approval(row) if row is not None else None

    async def answer(
        self, approval_id: str, *, approved: bool, scope: Scope | None, answered_by: str, reason: str
    ) -> Approval:
        """Answer a pending approval; NotFound or FailedPrecondition (answered or expired already)."""
        state = "approved" if approved else "denied"
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                row = await conn.fetchrow(QUERIES["answer"], approval_id, state, scope, answered_by, reason or None)
                if row is not None and approved and scope == "session":
                    await conn.execute(QUERIES["grant"], row["session_id"], row["tool_name"], answered_by, approval_id)
        if row is not None:
            return _approval(row)
        current = await self.get(approval_id)
        if current.state == "pending":
            await self.expire(approval_id)
            raise FailedPrecondition(f"approval {approval_id!r} expired at {current.expires_at.isoformat()}")
        raise FailedPrecondition(f"approval {approval_id!r} is {current.state} already")

    async def granted(self, session_id: str, tool_name: str) -> bool:
        with wrap_db_errors():
            return bool(await self.pool.fetchval(QUERIES["granted"], session_id, tool_name))

    async def grants(self, session_id: str) -> list[Grant]:
        with wrap_db_errors():
            rows = await self.pool.fetch(QUERIES["grants"], session_id)
        return [record_of(Grant, row) for row in rows]

    async def revoke(self, session_id: str, tool_name: str) -> None:
        with wrap_db_errors():
            revoked = await self.pool.fetchval(QUERIES["revoke"], session_id, tool_name)
        if revoked is None:
            raise NotFound(f"session {session_id!r} has no grant for {tool_name!r}")

    async def list(self, *, state: str = "", session_id: str = "") -> list[Approval]:
        with wrap_db_errors():
            rows = await self.pool.fetch(QUERIES["list"], state, session_id)
        return [_approval(row) for row in rows]

    async def claim(self, approval_id: str) -> bool:
        """True for the one caller that may run the approved call; False: it ran (or started) already."""
        with wrap_db_errors():
            return await self.pool.fetchval(QUERIES["claim"], approval_id) is not None

    async def finished(self, approval_id: str, outcome: dict[str, Any]) -> None:
        with wrap_db_errors():
            await self.pool.execute(QUERIES["finished"], approval_id, orjson.dumps(outcome).decode())

    async def waiting(self, turn_id: str, waiting: bool) -> None:
        with wrap_db_errors():
            await self.pool.execute(QUERIES["wait"], turn_id, waiting)
