"""Long-term memories (popagent_memories): written by `remember` and /api/memories, recalled every turn.

Recall relevance is PostgreSQL full-text ranking (`ts_rank_cd` over an English
`tsvector` of each memory, queried with any of the prompt's stemmed words). It is
honest and cheap, and it only finds memories that share words with the prompt: there
are no embeddings here, so no semantic (pgvector) search.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import asyncpg

from popagent_core.db import wrap_db_errors
from popagent_core.errors import InvalidArgument, NotFound

MAX_CONTENT_CHARS = 2000
LIST_LIMIT = 200
MAX_QUERY_CHARS = 500
# At most this many memories, and this many characters of them, go into one turn's context.
RECALL_LIMIT = 5
RECALL_MAX_CHARS = 4000

Source = Literal["user", "agent"]


@dataclass(frozen=True)
class Memory:
    id: str
    content: str
    source: str
    session_id: str
    turn_id: str
    created_at: str
    updated_at: str


def _memory(row: asyncpg.Record) -> Memory:
    return Memory(
        id=str(row["id"]),
        content=row["content"],
        source=row["source"],
        session_id=row["session_id"] or "",
        turn_id=row["turn_id"] or "",
        created_at=row["created_at"].isoformat(),
        updated_at=row["updated_at"].isoformat(),
    )


def check_content(content: str) -> str:
    content = content.strip()
    if not 1 <= len(content) <= MAX_CONTENT_CHARS or "\x00" in content:
        raise InvalidArgument(f"content must be 1 to {MAX_CONTENT_CHARS} characters")
    return content


def _memory_id(memory_id: str) -> uuid.UUID:
    try:
        return uuid.UUID(memory_id)
    except ValueError:
        raise NotFound(f"memory {memory_id!r} not found") from None


class MemoryStore:
    def __init__(self, pool: asyncpg.Pool, queries: Mapping[str, str]) -> None:
        self.pool = pool
        self.q = queries

    async def list(self, query: str = "", limit: int = LIST_LIMIT) -> list[Memory]:
        """Newest first; with `query`, only memories matching it (web-search syntax)."""
        if len(query) > MAX_QUERY_CHARS:
            raise InvalidArgument(f"query must be at most {MAX_QUERY_CHARS} characters")
        with wrap_db_errors():
            rows = await self.pool.fetch(self.q["list_memories"], query.strip(), max(1, min(limit, LIST_LIMIT)))
        return [_memory(row) for row in rows]

    async def create(
        self, content: str, *, source: Source, session_id: str = "", turn_id: str = ""
    ) -> tuple[Memory, bool]:
        """Store a memory; an identical one (ignoring case) is returned instead. True when new."""
        with wrap_db_errors():
            row = await self.pool.fetchrow(
                self.q["insert_memory"],
                uuid.uuid4(),
                check_content(content),
                source,
                session_id or None,
                turn_id or None,
            )
        assert row is not None
        return _memory(row), bool(row["created"])

    async def update(self, memory_id: str, content: str) -> Memory:
        with wrap_db_errors():
            row = await self.pool.fetchrow(self.q["update_memory"], _memory_id(memory_id), check_content(content))
        if row is None:
            raise NotFound(f"memory {memory_id!r} not found")
        return _memory(row)

    async def delete(self, memory_id: str) -> None:
        with wrap_db_errors():
            status = await self.pool.execute(self.q["delete_memory"], _memory_id(memory_id))
        if status == "DELETE 0":
            raise NotFound(f"memory {memory_id!r} not found")

    async def recall(self, prompt: str, limit: int = RECALL_LIMIT) -> list[str]:
        """The memories most relevant to `prompt`, best first, bounded in count and characters."""
        if not prompt.strip():
            return []
        with wrap_db_errors():
            rows = await self.pool.fetch(self.q["recall_memories"], recall_query(prompt), limit)
        return bounded_recall([row["content"] for row in rows])


def recall_query(prompt: str) -> str:
    """The part of a prompt recall looks at (its words; a long prompt's start)."""
    return prompt[: 4 * MAX_QUERY_CHARS]


def bounded_recall(contents: list[str]) -> list[str]:
    """Recalled memories, best first, cut to the per-turn character budget."""
    recalled: list[str] = []
    budget = RECALL_MAX_CHARS
    for content in contents:
        if len(content) > budget:
            break
        recalled.append(content)
        budget -= len(content)
    return recalled
