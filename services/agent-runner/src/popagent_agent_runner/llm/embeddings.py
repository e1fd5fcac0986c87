"""The gateway's retrieval calls: OpenAI-compatible `POST /v1/embeddings` and the Jina/Cohere `POST /v1/rerank`.

Both go to the same server as chat (`NINEROUTER_URL`, which ends in `/v1`), with the same bearer key,
over a shared `httpx.AsyncClient` (pass the one the model pool uses, or let the client open its own).
Embeddings are sent in batches of `batch_size` inputs and come back in input order; rerank results
come back best first. Failures are the `popagent_core.errors` tree, with the gateway's own message:

| what happened | error |
|---|---|
| cannot connect, connection dropped | `Unavailable` |
| timed out | `DeadlineExceeded` |
| 400 / 422 (bad input, input too long) | `InvalidArgument` |
| 401 / 403 (key), 404 (model unknown) | `ConfigurationError` |
| 429 | `ResourceExhausted` |
| 5xx, a reply that is not the documented shape | `Unavailable` |

This module never imports `turn/`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Self

import httpx
import orjson

from popagent_core.errors import (
    ConfigurationError,
    DeadlineExceeded,
    InvalidArgument,
    PopagentError,
    ResourceExhausted,
    Unavailable,
)

__all__ = ["DEFAULT_BATCH_SIZE", "Embeddings", "GatewayRetrieval", "RerankHit"]

DEFAULT_BATCH_SIZE = 64
"""Inputs per `/v1/embeddings` request: what OpenAI-compatible servers (llama.cpp, vLLM, 9Router) take at once."""
DEFAULT_TIMEOUT: Any = httpx.Timeout(120.0, connect=5.0)


@dataclasses.dataclass(frozen=True, slots=True)
class Embeddings:
    """The vectors of a list of inputs, in input order."""

    model: str
    vectors: list[list[float]]
    prompt_tokens: int
    requests: int
    """How many `/v1/embeddings` requests the batches took."""

    @property
    def dimensions(self) -> int:
        return len(self.vectors[0]) if self.vectors else 0


@dataclasses.dataclass(frozen=True, slots=True)
class RerankHit:
    """One reranked document: its index in the list sent, and the reranker's score (higher is better)."""

    index: int
    relevance_score: float


class GatewayRetrieval:
    """Embeddings and reranking through the OpenAI-compatible model gateway."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        http_client: httpx.AsyncClient | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> None:
        """Args:
        base_url: The gateway's OpenAI base URL, ending in `/v1` (`NINEROUTER_URL`).
        api_key: Sent as `Authorization: Bearer <api_key>` (`NINEROUTER_API_KEY`); none when empty.
        http_client: A client to share; by default one is opened (close it with `aclose`).
        batch_size: Inputs per embeddings request.
        """
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        base = base_url.rstrip("/") + "/"
        self._embeddings_url = base + "embeddings"
        self._rerank_url = base + "rerank"
        self._own_client = http_client is None
        self._client = http_client or httpx.AsyncClient(timeout=DEFAULT_TIMEOUT)
        self._headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self.batch_size = batch_size

    async def embed(self, model: str, inputs: Sequence[str]) -> Embeddings:
        """The embedding of every input, in order (batched). An empty list makes no request."""
        if not model:
            raise ConfigurationError("no embedding model is configured")
        vectors: list[list[float]] = []
        tokens = 0
        requests = 0
        answered_model = model
        for start in range(0, len(inputs), self.batch_size):
            batch = list(inputs[start : start + self.batch_size])
            data = await self._post(self._embeddings_url, {"model": model, "input": batch}, what="embeddings")
            requests += 1
            vectors.extend(_batch_vectors(data, len(batch)))
            usage = data.get("usage") or {}
            tokens += int(usage.get("prompt_tokens") or 0) if isinstance(usage, dict) else 0
            answered_model = str(data.get("model") or model)
        dims = {len(vector) for vector in vectors}
        if len(dims) > 1:
            raise Unavailable(f"embeddings gateway: vectors of different lengths {sorted(dims)} from one model")
        return Embeddings(answered_model, vectors, tokens, requests)

    async def rerank(
        self, model: str, query: str, documents: Sequence[str], top_n: int | None = None
    ) -> list[RerankHit]:
        """The documents' indexes, best first, as the reranker scores them against `query`."""
        if not model:
            raise ConfigurationError("no rerank model is configured")
        if not documents:
            return []
        body: dict[str, Any] = {"model": model, "query": query, "documents": list(documents)}
        if top_n is not None:
            body["top_n"] = top_n
        data = await self._post(self._rerank_url, body, what="rerank")
        results = data.get("results")
        if not isinstance(results, list):
            raise Unavailable("rerank gateway: reply has no `results` list")
        hits: list[RerankHit] = []
        for result in results:
            try:
                index = int(result["index"])
                score = float(result["relevance_score"])
            except (KeyError, TypeError, ValueError) as error:
                raise Unavailable(f"rerank gateway: malformed result {str(result)[:120]}") from error
            if not 0 <= index < len(documents):
                raise Unavailable(f"rerank gateway: result index {index} out of range")
            hits.append(RerankHit(index, score))
        hits.sort(key=lambda hit: hit.relevance_score, reverse=True)
        return hits

    async def _post(self, url: str, body: dict[str, Any], *, what: str) -> dict[str, Any]:
        try:
            response = await self._client.post(url, content=orjson.dumps(body), headers=self._headers)
            content = await response.aread()
        except httpx.TimeoutException as error:
            raise DeadlineExceeded(f"{what} gateway timed out: {error or type(error).__name__}") from error
        except httpx.TransportError as error:
            raise Unavailable(f"{what} gateway unreachable: {error or type(error).__name__}") from error
        if response.status_code >= 400:
            raise _status_error(what, body.get("model", ""), response.status_code, content)
        try:
            data = orjson.loads(content)
        except orjson.JSONDecodeError as error:
            raise Unavailable(f"{what} gateway: reply is not JSON") from error
        if not isinstance(data, dict):
            raise Unavailable(f"{what} gateway: reply is not a JSON object")
        return data

    async def aclose(self) -> None:
        if self._own_client:
            await self._client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


def _batch_vectors(data: dict[str, Any], expected: int) -> list[list[float]]:
    items = data.get("data")
    if not isinstance(items, list) or len(items) != expected:
        count = len(items) if isinstance(items, list) else "no"
        raise Unavailable(f"embeddings gateway: {count} vectors for {expected} inputs")
    ordered: list[list[float] | None] = [None] * expected
    for position, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("embedding"), list):
            raise Unavailable("embeddings gateway: an item has no `embedding` list (base64 is not asked for)")
        index = item.get("index", position)
        if not isinstance(index, int) or not 0 <= index < expected or ordered[index] is not None:
            raise Unavailable(f"embeddings gateway: bad item index {index!r}")
        ordered[index] = [float(value) for value in item["embedding"]]
    return [vector for vector in ordered if vector is not None]


def _status_error(what: str, model: str, status: int, content: bytes) -> PopagentError:
    message = content.decode("utf-8", "replace").strip()[:300]
    try:
        parsed = orjson.loads(content)
        error = parsed.get("error", parsed) if isinstance(parsed, dict) else parsed
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            message = error["message"]
        elif isinstance(error, str):
            message = error
    except orjson.JSONDecodeError:
        pass
    text = f"{what} gateway answered {status} for model {model!r}: {message or 'no reason given'}"
    if status in (400, 413, 422):
        return InvalidArgument(text)
    if status in (401, 403, 404):
        return ConfigurationError(text)
    if status == 429:
        return ResourceExhausted(text)
    return Unavailable(text)
