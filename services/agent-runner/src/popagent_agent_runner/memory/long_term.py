"""Long-term memories (popagent_memories): written by `remember` and /api/memories, the relevant ones put before every turn.

Each memory is a `fact` or a `preference`. Semantics:
- the user (/api/memories) creates, edits, pins, unpins and deletes any memory; a pinned memory is
  never changed by the agent and never ages out;
- `remember` (the agent's write) stores the text with anything credential-like redacted
  (`popagent_core.secret_text`), and says how many it withheld; a memory the user writes through
  /api/memories is stored as typed (the user's choice);
- `remember` adds a memory, or, when one with nearly the same words exists (`NEAR_DUPLICATE` of
  their stemmed words in common), replaces that one's text with the newer statement instead of
  adding a copy; a pinned near-duplicate stays as the user left it;
- retention (`POPAGENT_MEMORY_RETENTION_DAYS`, 0 keeps everything): agent-written, unpinned
  memories not written for that long are forgotten (swept at most every `SWEEP_INTERVAL_S`);
- memories are not thread data: deleting a session keeps them (session and turn are provenance).

The memories relevant to a prompt are ranked by PostgreSQL full-text search (`ts_rank_cd`, any of the prompt's stemmed words);
with an embedding model configured (`POPAGENT_MEMORY_EMBEDDING_MODEL`) it is hybrid: the nearest
memories by gateway embeddings (each memory embedded once per model and content) fused with the
full-text ranking by reciprocal rank.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import asyncpg

from popagent_core.db import wrap_db_errors
from popagent_core.errors import InvalidArgument, NotFound, PopagentError
from popagent_core.secret_text import screen

if TYPE_CHECKING:
    from popagent_agent_runner.llm.embeddings import GatewayRetrieval

logger = logging.getLogger(__name__)

MAX_CONTENT_CHARS = 2000
LIST_LIMIT = 200
MAX_QUERY_CHARS = 500
# At most this many memories, and this many characters of them, go into one turn's context.
MEMORIES_BEFORE_TURN_LIMIT = 5
MEMORIES_BEFORE_TURN_MAX_CHARS = 4000

Source = Literal["user", "agent"]
Kind = Literal["fact", "preference"]
KINDS = ("fact", "preference")
# Two memories are near-duplicates when this share of their stemmed words (Jaccard) is common.
NEAR_DUPLICATE = 0.6
SWEEP_INTERVAL_S = 600.0
RRF_K = 60


@dataclass(frozen=True)
class Memory:
    id: str
    content: str
    source: str
    session_id: str
    turn_id: str
    created_at: str
    updated_at: str
    kind: str = "fact"
    pinned: bool = False


def _memory(row: asyncpg.Record) -> Memory:
    return Memory(
        id=str(row["id"]),
        content=row["content"],
        source=row["source"],
        session_id=row["session_id"] or "",
        turn_id=row["turn_id"] or "",
        created_at=row["created_at"].isoformat(),
        updated_at=row["updated_at"].isoformat(),
        kind=row["kind"],
        pinned=row["pinned"],
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


def check_kind(kind: str) -> str:
    kind = kind or "fact"
    if kind not in KINDS:
        raise InvalidArgument(f"kind must be one of {', '.join(KINDS)}")
    return kind


def _jaccard(a: list[str], b: list[str]) -> float:
    left, right = set(a), set(b)
    return len(left & right) / len(left | right) if left | right else 0.0


@dataclass(frozen=True)
class Remembered:
    memory: Memory
    # created: a new memory; merged: an existing one now says this; kept: the same or a pinned one.
    outcome: Literal["created", "merged", "kept"]
    # How many credentials were redacted from the text before it was stored.
    withheld: int = 0


class MemoryStore:
    def __init__(
        self,
        pool: asyncpg.Pool,
        queries: Mapping[str, str],
        *,
        retention_days: int = 0,
        retrieval: GatewayRetrieval | None = None,
        embedding_model: str = "",
    ) -> None:
        self.pool = pool
        self.q = queries
        self.retention_days = retention_days
        self.retrieval = retrieval if embedding_model else None
        self.embedding_model = embedding_model
        self._swept_at: float | None = None

    @property
    def hybrid(self) -> bool:
        return self.retrieval is not None

    async def sweep(self, *, force: bool = False) -> int:
        """Apply retention now (at most every SWEEP_INTERVAL_S unless forced); how many were forgotten."""
        if self.retention_days <= 0:
            return 0
        now = time.monotonic()
        if not force and self._swept_at is not None and now - self._swept_at < SWEEP_INTERVAL_S:
            return 0
        self._swept_at = now
        with wrap_db_errors():
            status = await self.pool.execute(self.q["sweep_memories"], self.retention_days)
        return int(status.split()[-1])

    async def list(self, query: str = "", limit: int = LIST_LIMIT) -> list[Memory]:
        """Newest first; with `query`, only memories matching it (web-search syntax)."""
        if len(query) > MAX_QUERY_CHARS:
            raise InvalidArgument(f"query must be at most {MAX_QUERY_CHARS} characters")
        await self.sweep()
        with wrap_db_errors():
            rows = await self.pool.fetch(self.q["list_memories"], query.strip(), max(1, min(limit, LIST_LIMIT)))
        return [_memory(row) for row in rows]

    async def create(
        self,
        content: str,
        *,
        source: Source,
        session_id: str = "",
        turn_id: str = "",
        kind: str = "fact",
        pinned: bool = False,
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
                check_kind(kind),
                pinned,
            )
        assert row is not None
        return _memory(row), bool(row["created"])

    async def remember(self, content: str, *, kind: str, session_id: str, turn_id: str) -> Remembered:
        """The agent's write, credentials redacted: a near-duplicate is merged (the newer statement
        wins), a pinned one kept."""
        screened = screen(check_content(content))
        content, kind = check_content(screened.text), check_kind(kind)
        remembered = await self._remember(content, kind=kind, session_id=session_id, turn_id=turn_id)
        return Remembered(remembered.memory, remembered.outcome, screened.withheld)

    async def _remember(self, content: str, *, kind: str, session_id: str, turn_id: str) -> Remembered:
        with wrap_db_errors():
            candidates = await self.pool.fetch(self.q["similar_memories"], content)
        for row in candidates:
            if _jaccard(row["lexemes"], row["new_lexemes"]) < NEAR_DUPLICATE:
                continue
            if row["pinned"] or (row["content"].lower() == content.lower() and row["kind"] == kind):
                return Remembered(_memory(row), "kept")
            with wrap_db_errors():
                merged = await self.pool.fetchrow(
                    self.q["merge_memory"], row["id"], content, kind, session_id or None, turn_id or None
                )
            if merged is not None:
                return Remembered(_memory(merged), "merged")
        memory, created = await self.create(content, source="agent", session_id=session_id, turn_id=turn_id, kind=kind)
        return Remembered(memory, "created" if created else "kept")

    async def update(
        self, memory_id: str, content: str | None = None, *, kind: str | None = None, pinned: bool | None = None
    ) -> Memory:
        """The user's edit: any field given (content, kind, pin); the others stay."""
        content = check_content(content) if content is not None else None
        kind = check_kind(kind) if kind is not None else None
        with wrap_db_errors():
            row = await self.pool.fetchrow(self.q["update_memory"], _memory_id(memory_id), content, kind, pinned)
        if row is None:
            raise NotFound(f"memory {memory_id!r} not found")
        return _memory(row)

    async def delete(self, memory_id: str) -> None:
        with wrap_db_errors():
            status = await self.pool.execute(self.q["delete_memory"], _memory_id(memory_id))
        if status == "DELETE 0":
            raise NotFound(f"memory {memory_id!r} not found")

    async def relevant_memories(self, prompt: str, limit: int = MEMORIES_BEFORE_TURN_LIMIT) -> list[str]:
        """The memories most relevant to `prompt`, best first, bounded in count and characters."""
        if not prompt.strip():
            return []
        await self.sweep()
        with wrap_db_errors():
            rows = await self.pool.fetch(self.q["recall_memories"], memories_query(prompt), limit * 2)
        if self.retrieval is None:
            return bounded_memories([row["content"] for row in rows][:limit])
        scores: dict[str, float] = {}
        for rank, row in enumerate(rows):
            scores[row["content"]] = scores.get(row["content"], 0.0) + 1.0 / (RRF_K + rank + 1)
        try:
            for rank, content in enumerate(await self._nearest(memories_query(prompt), limit * 2)):
                scores[content] = scores.get(content, 0.0) + 1.0 / (RRF_K + rank + 1)
        except PopagentError as exc:
            logger.warning("relevant memories by full text only, without embeddings", extra={"error": str(exc)})
        return bounded_memories(sorted(scores, key=lambda c: scores[c], reverse=True)[:limit])

    async def _nearest(self, query: str, limit: int) -> list[str]:
        assert self.retrieval is not None
        model = self.embedding_model
        with wrap_db_errors():
            missing = await self.pool.fetch(self.q["unembedded_memories"], model, 256)
        embedded = await self.retrieval.embed(model, [row["content"] for row in missing] + [query])
        vectors = ["[" + ",".join(f"{v:.6g}" for v in vector) + "]" for vector in embedded.vectors]
        with wrap_db_errors():
            if missing:
                await self.pool.execute(
                    self.q["store_memory_embeddings"],
                    [row["id"] for row in missing],
                    [row["content_md5"] for row in missing],
                    vectors[:-1],
                    model,
                )
            rows = await self.pool.fetch(self.q["nearest_memories"], vectors[-1], model, limit)
        return [row["content"] for row in rows]


def memories_query(prompt: str) -> str:
    """The part of a prompt the relevant memories are searched with (its words; a long prompt's start)."""
    return prompt[: 4 * MAX_QUERY_CHARS]


def bounded_memories(contents: list[str]) -> list[str]:
    """Relevant memories, best first, cut to the per-turn character budget."""
    kept: list[str] = []
    budget = MEMORIES_BEFORE_TURN_MAX_CHARS
    for content in contents:
        if len(content) > budget:
            break
        kept.append(content)
        budget -= len(content)
    return kept
