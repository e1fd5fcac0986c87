"""The record of each contained self-update attempt (popagent_self_update_attempts), for the Autonomy
page: where it started, how its delegations ended, what verification said, the ref it imported."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg
import orjson

from popagent_core.db import load_queries, wrap_db_errors
from popagent_core.errors import NotFound

QUERIES = load_queries(Path(__file__).parent / "self_update.sql")
MAX_LISTED = 100


@dataclass(frozen=True)
class SelfUpdateAttempt:
    id: str
    task_id: str
    attempt: int
    workspace_id: str
    # running | imported | no-op | refused | failed
    status: str
    base_commit: str
    base_branch: str
    branch: str
    delegations: tuple[tuple[str, str], ...]
    changed_paths: tuple[str, ...]
    diff_stat: str
    verification: str
    commit: str | None
    ref: str | None
    stages: tuple[tuple[str, int], ...]
    created_at: datetime
    finished_at: datetime | None


def _attempt(row: asyncpg.Record) -> SelfUpdateAttempt:
    delegations: list[dict[str, Any]] = orjson.loads(row["delegations"])
    stages: list[dict[str, Any]] = orjson.loads(row["stages"])
    return SelfUpdateAttempt(
        id=row["id"],
        task_id=row["task_id"],
        attempt=row["attempt"],
        workspace_id=row["workspace_id"],
        status=row["status"],
        base_commit=row["base_commit"],
        base_branch=row["base_branch"],
        branch=row["branch"],
        delegations=tuple((str(d["agent"]), str(d["status"])) for d in delegations),
        changed_paths=tuple(row["changed_paths"]),
        diff_stat=row["diff_stat"],
        verification=row["verification"],
        commit=row["commit"],
        ref=row["ref"],
        stages=tuple((str(s["stage"]), int(s["ms"])) for s in stages),
        created_at=row["created_at"],
        finished_at=row["finished_at"],
    )


@dataclass(frozen=True)
class AttemptEnd:
    status: str
    delegations: list[tuple[str, str]]
    verification: str
    changed_paths: tuple[str, ...] = ()
    diff_stat: str = ""
    commit: str | None = None
    ref: str | None = None
    stages: tuple[tuple[str, float], ...] = ()


class SelfUpdateAttemptStore:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def start(self, attempt_id: str, task_id: str, attempt: int, workspace_id: str) -> None:
        with wrap_db_errors():
            await self.pool.execute(QUERIES["start_attempt"], attempt_id, task_id, attempt, workspace_id)

    async def prepared(self, attempt_id: str, base_commit: str, base_branch: str, branch: str) -> None:
        with wrap_db_errors():
            await self.pool.execute(QUERIES["prepared_attempt"], attempt_id, base_commit, base_branch, branch)

    async def finish(self, attempt_id: str, end: AttemptEnd) -> None:
        with wrap_db_errors():
            await self.pool.execute(
                QUERIES["finish_attempt"],
                attempt_id,
                end.status,
                orjson.dumps([{"agent": agent, "status": status} for agent, status in end.delegations]).decode(),
                list(end.changed_paths),
                end.diff_stat,
                end.verification,
                end.commit,
                end.ref,
                orjson.dumps([{"stage": name, "ms": round(seconds * 1000)} for name, seconds in end.stages]).decode(),
            )

    async def list(self, workspace_id: str = "", limit: int = MAX_LISTED) -> list[SelfUpdateAttempt]:
        with wrap_db_errors():
            rows = await self.pool.fetch(QUERIES["list_attempts"], workspace_id, min(max(limit, 1), MAX_LISTED))
        return [_attempt(row) for row in rows]

    async def get(self, attempt_id: str) -> SelfUpdateAttempt:
        with wrap_db_errors():
            row = await self.pool.fetchrow(QUERIES["get_attempt"], attempt_id)
        if row is None:
            raise NotFound(f"no self-update attempt {attempt_id!r}")
        return _attempt(row)

    async def clear_ref(self, attempt_id: str) -> None:
        with wrap_db_errors():
            await self.pool.fetchval(QUERIES["clear_ref"], attempt_id)
