"""Hybrid documentation search: vector and full-text candidates fused by reciprocal rank, then reranked.

Both candidate lists come from the one workspace (every query names it), from chunks made
with the current embedding model. Reciprocal rank fusion (Cormack et al. 2009, k = 60) adds
`1 / (k + rank)` over the lists, so a chunk high in both wins without the two scores having
to be comparable. With a rerank model configured, the fused head goes through the gateway's
`/v1/rerank` and its order and scores are the reranker's; otherwise the fused order stands.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from popagent_agent_runner.docs.store import Candidate, DocsStore
from popagent_agent_runner.llm.embeddings import GatewayRetrieval
from popagent_core.errors import FailedPrecondition, InvalidArgument

RRF_K = 60
MAX_K = 50
MAX_QUERY_CHARS = 2000
CANDIDATES = 40
"""Candidates each side contributes before fusion."""
RERANK_WINDOW = 20
"""Fused candidates the reranker sees (at least k)."""
HNSW_EF_SEARCH = 400


SearchHit = Candidate
"""A hit is the candidate chunk itself, its score now the fused (or reranked) one."""


@dataclass(kw_only=True, eq=False)
class DocsSearch:
    store: DocsStore
    retrieval: GatewayRetrieval
    embedding_model: str
    rerank_model: str = ""

    async def search(self, workspace_id: str, query: str, k: int = 5, path_prefix: str = "") -> list[SearchHit]:
        query = query.strip()
        if not query or len(query) > MAX_QUERY_CHARS:
            raise InvalidArgument(f"query must be 1 to {MAX_QUERY_CHARS} characters")
        if not 1 <= k <= MAX_K:
            raise InvalidArgument(f"k must be between 1 and {MAX_K}")
        if not self.embedding_model:
            raise FailedPrecondition(
                "documentation search is off: no embedding model is configured (POPAGENT_DOCS_EMBEDDING_MODEL)"
            )
        vector = (await self.retrieval.embed(self.embedding_model, [query])).vectors[0]
        limit = max(CANDIDATES, k)
        by_vector = await self.store.vector_candidates(
            workspace_id, self.embedding_model, vector, path_prefix, limit, max(HNSW_EF_SEARCH, limit)
        )
        by_text = await self.store.text_candidates(workspace_id, self.embedding_model, query, path_prefix, limit)
        fused = fuse(by_vector, by_text)
        if not self.rerank_model or not fused:
            return [_hit(candidate, score) for candidate, score in fused[:k]]
        head = fused[: max(RERANK_WINDOW, k)]
        ranked = await self.retrieval.rerank(
            self.rerank_model, query, [_rerank_text(candidate) for candidate, _ in head], top_n=k
        )
        return [_hit(head[hit.index][0], hit.relevance_score) for hit in ranked[:k]]


def fuse(*rankings: list[Candidate]) -> list[tuple[Candidate, float]]:
    """Reciprocal rank fusion of candidate lists (each best first), best first; ties keep the first list's order."""
    scores: dict[int, float] = {}
    chunks: dict[int, Candidate] = {}
    for ranking in rankings:
        for rank, candidate in enumerate(ranking, start=1):
            scores[candidate.chunk_id] = scores.get(candidate.chunk_id, 0.0) + 1.0 / (RRF_K + rank)
            chunks.setdefault(candidate.chunk_id, candidate)
    order = sorted(scores, key=lambda chunk_id: -scores[chunk_id])
    return [(chunks[chunk_id], scores[chunk_id]) for chunk_id in order]


def _rerank_text(candidate: Candidate) -> str:
    head = " > ".join((candidate.path, *candidate.heading_path))
    return f"{head}\n\n{candidate.content}"


def _hit(candidate: Candidate, score: float) -> SearchHit:
    return replace(candidate, score=score)
