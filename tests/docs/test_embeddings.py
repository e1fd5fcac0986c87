"""The gateway's retrieval calls (`llm.embeddings`) against the scripted server's `/v1/embeddings` and `/v1/rerank`."""

from __future__ import annotations

import math

import pytest

from popagent_agent_runner.llm.embeddings import GatewayRetrieval
from popagent_core.errors import ConfigurationError, InvalidArgument, ResourceExhausted, Unavailable
from popagent_dev.embedded import free_port
from support.model_gateway import ModelGateway

KEY = "sk-test-key"


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


async def test_embeddings_are_batched_in_order_and_shared_words_are_close():
    texts = [f"text number {n}" for n in range(7)] + ["pgvector HNSW index", "the HNSW index of pgvector", "bananas"]
    async with ModelGateway(api_key=KEY) as gw, GatewayRetrieval(gw.url, KEY, batch_size=4) as client:
        result = await client.embed("fake/embed", texts)
        again = await client.embed("fake/embed", ["bananas"])

    assert result.requests == 3 and [len(body["input"]) for body in gw.embedding_requests[:3]] == [4, 4, 2]
    assert gw.embedded_inputs == 11
    assert len(result.vectors) == 10 and result.dimensions == gw.embedding_dims
    assert all(math.isclose(cosine(v, v), 1.0, rel_tol=1e-9) for v in result.vectors)
    assert result.vectors[9] == again.vectors[0]  # deterministic, and returned in input order
    assert cosine(result.vectors[7], result.vectors[8]) > 0.9
    assert cosine(result.vectors[7], result.vectors[9]) < 0.3
    assert result.prompt_tokens > 0


async def test_rerank_puts_the_document_sharing_the_query_words_first():
    documents = ["bananas are yellow", "HNSW index recall in pgvector", "pgvector basics"]
    async with ModelGateway(api_key=KEY) as gw, GatewayRetrieval(gw.url, KEY) as client:
        hits = await client.rerank("fake/rerank", "pgvector HNSW recall", documents, top_n=2)

    assert [hit.index for hit in hits] == [1, 2]
    assert hits[0].relevance_score > hits[1].relevance_score
    assert gw.rerank_requests[0]["top_n"] == 2


@pytest.mark.parametrize(
    ("status", "error"),
    [(400, InvalidArgument), (404, ConfigurationError), (429, ResourceExhausted), (503, Unavailable)],
)
async def test_gateway_errors_become_the_error_tree_with_the_gateway_reason(status, error):
    async with ModelGateway(api_key=KEY) as gw, GatewayRetrieval(gw.url, KEY) as client:
        gw.fail_retrieval = (status, "scripted trouble")
        with pytest.raises(error, match="scripted trouble"):
            await client.embed("fake/embed", ["x"])
        with pytest.raises(error, match="scripted trouble"):
            await client.rerank("fake/rerank", "q", ["x"])


async def test_a_wrong_key_is_a_configuration_error_and_a_dead_gateway_is_unavailable():
    async with ModelGateway(api_key=KEY) as gw, GatewayRetrieval(gw.url, "sk-wrong") as client:
        with pytest.raises(ConfigurationError, match="401"):
            await client.embed("fake/embed", ["x"])
        assert gw.unauthorized == 1
    async with GatewayRetrieval(f"http://127.0.0.1:{free_port()}/v1") as client:
        with pytest.raises(Unavailable, match="unreachable"):
            await client.embed("fake/embed", ["x"])
    async with GatewayRetrieval("http://127.0.0.1:1/v1") as client:
        with pytest.raises(ConfigurationError, match="no embedding model"):
            await client.embed("", ["x"])
