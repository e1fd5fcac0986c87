"""Exact recall: the original messages of this thread, or of every `popagent-user` thread
(`retrieval_scope`), that match a query, quoted exactly with their dates.

Full text always (PostgreSQL `ts_rank_cd` over each message's UI text, any stemmed word of the
query); with an embedding model configured (`POPAGENT_MEMORY_EMBEDDING_MODEL`), also the nearest
messages by cosine distance of gateway embeddings (`llm.embeddings`, each message embedded once per
model, at most `EMBED_PER_SEARCH` new ones per search), the two lists fused by reciprocal rank.
The turn asking (its message, once stored, and what follows) is never among the results.
Quotes are exact but for credentials (`popagent_core.secret_text`): a password pasted in one session
must not be quoted into another one's context, nor sent to the embedding model.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import asyncpg
import orjson

from popagent_agent_runner.llm.embeddings import GatewayRetrieval
from popagent_core.db import wrap_db_errors
from popagent_core.errors import PopagentError
from popagent_core.secret_text import redact_secrets

logger = logging.getLogger(__name__)

MAX_RESULTS = 10
QUOTE_MAX_CHARS = 2000
EMBED_PER_SEARCH = 256
# Reciprocal rank fusion's constant (the usual 60).
RRF_K = 60


@dataclass(frozen=True)
class Recalled:
    thread_id: str
    message_id: str
    role: str
    created_at: dt.datetime
    text: str

    def to_json(self) -> dict[str, Any]:
        return {
            "sessionId": self.thread_id,
            "messageId": self.message_id,
            "role": self.role,
            "date": self.created_at.isoformat(),
            "text": self.text,
        }


def message_text(parts_json: str | None) -> str:
    """The text parts of a stored UI message, joined: what the user (or the assistant) wrote."""
    parts = orjson.loads(parts_json) if parts_json else []
    return "\n".join(
        p["text"] for p in parts if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
    )


def _quote(text: str) -> str:
    # Only twice the quote's bound is screened: a credential cut there lies past the bound once redacted.
    text = redact_secrets(text[: 2 * QUOTE_MAX_CHARS])
    return text if len(text) <= QUOTE_MAX_CHARS else text[: QUOTE_MAX_CHARS - 1] + "…"


class HistorySearch:
    def __init__(
        self,
        pool: asyncpg.Pool,
        queries: Mapping[str, str],
        *,
        retrieval: GatewayRetrieval | None = None,
        embedding_model: str = "",
    ) -> None:
        self.pool = pool
        self.q = queries
        self.retrieval = retrieval if embedding_model else None
        self.embedding_model = embedding_model

    async def scope(self) -> str:
        with wrap_db_errors():
            return await self.pool.fetchval(self.q["retrieval_scope"]) or "thread"

    async def search(
        self, thread_id: str, query: str, limit: int = 5, *, scope: str | None = None, asking_id: str = ""
    ) -> list[Recalled]:
        """The best `limit` messages for `query`; `asking_id` is the asking turn's user message id."""
        scope = scope or await self.scope()
        every = scope == "resource"
        limit = max(1, min(limit, MAX_RESULTS))
        with wrap_db_errors():
            rows = await self.pool.fetch(self.q["recall_full_text"], query, thread_id, every, limit * 4, asking_id)
        ranked: dict[tuple[str, int], float] = {}
        found: dict[tuple[str, int], asyncpg.Record] = {}
        for rank, row in enumerate(rows):
            key = (row["thread_id"], row["seq"])
            ranked[key] = ranked.get(key, 0.0) + 1.0 / (RRF_K + rank + 1)
            found[key] = row
        if self.retrieval is not None and query.strip():
            try:
                for rank, row in enumerate(await self._nearest(thread_id, every, query, limit * 4, asking_id)):
                    key = (row["thread_id"], row["seq"])
                    ranked[key] = ranked.get(key, 0.0) + 1.0 / (RRF_K + rank + 1)
                    found.setdefault(key, row)
            except PopagentError as exc:
                # The gateway's embeddings failed: full text still answers.
                logger.warning("recall without embeddings", extra={"error": str(exc)})
        best = sorted(ranked, key=lambda key: ranked[key], reverse=True)[:limit]
        return [
            Recalled(
                found[key]["thread_id"],
                found[key]["id"],
                found[key]["role"],
                found[key]["created_at"],
                _quote(message_text(found[key]["parts"])),
            )
            for key in best
        ]

    async def _nearest(
        self, thread_id: str, every: bool, query: str, limit: int, asking_id: str
    ) -> list[asyncpg.Record]:
        assert self.retrieval is not None
        model = self.embedding_model
        with wrap_db_errors():
            missing = await self.pool.fetch(
                self.q["recall_unembedded"], thread_id, every, model, EMBED_PER_SEARCH, asking_id
            )
        texts = [(row["thread_id"], row["seq"], redact_secrets(message_text(row["parts"]))) for row in missing]
        texts = [(t, s, text) for t, s, text in texts if text.strip()]
        inputs = [text for _, _, text in texts] + [query]
        embedded = await self.retrieval.embed(model, inputs)
        vectors = [_vector(v) for v in embedded.vectors]
        if texts:
            with wrap_db_errors():
                await self.pool.execute(
                    self.q["store_message_embeddings"],
                    [t for t, _, _ in texts],
                    [s for _, s, _ in texts],
                    vectors[:-1],
                    model,
                )
        with wrap_db_errors():
            return await self.pool.fetch(
                self.q["recall_vector"], thread_id, every, vectors[-1], model, limit, asking_id
            )


def _vector(values: list[float]) -> str:
    return "[" + ",".join(f"{v:.6g}" for v in values) + "]"
