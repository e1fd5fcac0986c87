"""GET /api/models and the model checks of mutation routes, against the scripted model gateway."""

from __future__ import annotations

import asyncio

import httpx
import orjson
import pytest

from popagent_core.errors import NotFound
from popagent_dev.embedded import free_port
from popagent_gateway.catalog import ModelCatalog, ensure_known_model, parse_catalog
from support.model_gateway import ModelGateway, ModelInfo
from support.stacks import API_KEY, CATALOG, Stack

HEADERS = {"x-popagent-key": API_KEY}


async def test_models_merge_the_catalog_with_the_persisted_default(client: httpx.AsyncClient) -> None:
    response = await client.get("/api/models")
    assert response.status_code == 200
    body = response.json()
    assert body["models"] == [model.id for model in CATALOG]
    assert body["contextWindows"] == {model.id: model.context_length for model in CATALOG}
    assert body["defaultModel"] == (await client.get("/api/settings/agent-runtime")).json()["defaultModel"]
    assert body["warning"] is None


def test_context_windows_come_from_either_9router_field_or_neither() -> None:
    raw = orjson.dumps(
        {
            "object": "list",
            "data": [
                {"id": "a/both", "context_length": 1000, "capabilities": {"contextWindow": 2000}},
                {"id": "a/caps", "capabilities": {"contextWindow": 3000, "maxOutput": 10}},
                {"id": "a/none"},
                {"id": "a/bad", "context_length": "big", "capabilities": {"contextWindow": -1}},
                {"id": "a/both"},
                {"no": "id"},
                "junk",
            ],
        }
    )
    models, windows = parse_catalog(raw)
    assert models == ("a/both", "a/caps", "a/none", "a/bad")
    assert windows == {"a/both": 1000, "a/caps": 3000}
    with pytest.raises(ValueError):
        parse_catalog(b'{"models": []}')


async def test_an_outage_serves_the_cached_list_with_a_warning_and_mutations_fail_open(api_stack: Stack) -> None:
    async with (
        ModelGateway(models=(ModelInfo("up/first", context_length=10_000),)) as models,
        api_stack.extra_gateway(NINEROUTER_URL=models.url, POPAGENT_MODEL_CATALOG_TTL_S=0.3) as url,
        httpx.AsyncClient(base_url=url, headers=HEADERS) as client,
    ):
        first = (await client.get("/api/models")).json()
        assert first["models"] == ["up/first"] and first["warning"] is None
        # Within the TTL the cached answer is served without asking again.
        await models.stop()
        assert (await client.get("/api/models")).json()["warning"] is None
        await asyncio.sleep(0.35)
        stale = (await client.get("/api/models")).json()
        assert stale["models"] == ["up/first"]
        assert stale["contextWindows"] == {"up/first": 10_000}
        assert "unavailable" in stale["warning"]
        # A model the stale list does not name is accepted with a warning.
        before = (await client.get("/api/agents")).json()["agents"][2]
        patched = await client.patch("/api/agents/implementer", json={"model": "new/model"})
        assert patched.status_code == 200, patched.text
        assert "not checked" in patched.headers["x-popagent-warning"]
        assert (await client.patch("/api/agents/implementer", json={"model": before["model"]})).status_code == 200
        # The gateway comes back: the next refresh replaces the list.
        models.models = [ModelInfo("up/second")]
        await models.start()
        await asyncio.sleep(0.35)  # the failure back-off (bounded by the TTL)
        fresh = (await client.get("/api/models")).json()
        assert fresh["models"] == ["up/second"] and fresh["warning"] is None


async def test_no_catalog_at_all_is_an_empty_list_with_a_warning(api_stack: Stack) -> None:
    async with (
        api_stack.extra_gateway(NINEROUTER_URL=f"http://127.0.0.1:{free_port()}/v1") as url,
        httpx.AsyncClient(base_url=url, headers=HEADERS) as client,
    ):
        body = (await client.get("/api/models")).json()
        assert body["models"] == [] and body["contextWindows"] == {}
        assert "unavailable" in body["warning"]
        assert body["defaultModel"]
    async with (
        api_stack.extra_gateway(NINEROUTER_URL="") as url,
        httpx.AsyncClient(base_url=url, headers=HEADERS) as client,
    ):
        assert "not configured" in (await client.get("/api/models")).json()["warning"]


async def test_ensure_known_model_for_the_chat_route() -> None:
    async with ModelGateway(models=(ModelInfo("fake/fake-chat"),)) as models:
        catalog = ModelCatalog(models.url)
        assert await ensure_known_model(catalog, "fake/fake-chat") is None
        with pytest.raises(NotFound, match="unknown model"):
            await ensure_known_model(catalog, "fake/other")
    down = ModelCatalog(f"http://127.0.0.1:{free_port()}/v1")
    warning = await ensure_known_model(down, "fake/other")
    assert warning is not None and "not checked" in warning
