"""The persisted default model and the agents' overrides, checked against the catalog.

A fresh model gateway does not list the seeded default model (`cx/gpt-5.3-codex`, a 9Router
id; the specialists inherit it), nor the researcher's and reviewer's overrides of the
9Router preset (`cx/gpt-5.3-codex-spark`) where a user set them: /api/models and
/api/agents say so, naming each setting, and a chat that would run on one is refused with
a 400 naming it before its turn starts. A catalog outage checks nothing and names nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx

from popagent_dev.embedded import free_port
from support.model_gateway import ModelGateway, ModelInfo
from support.stacks import API_KEY, Stack

HEADERS = {"x-popagent-key": API_KEY}
FRESH_CATALOG = (ModelInfo("up/only", context_length=32_000),)
SEEDED_DEFAULT = "cx/gpt-5.3-codex"
SEEDED_OVERRIDE = "cx/gpt-5.3-codex-spark"


@contextlib.asynccontextmanager
async def gateway_with(api_stack: Stack, **overrides: Any) -> AsyncIterator[httpx.AsyncClient]:
    async with (
        api_stack.extra_gateway(**overrides) as url,
        httpx.AsyncClient(base_url=url, headers=HEADERS, timeout=30.0) as client,
    ):
        yield client


@contextlib.asynccontextmanager
async def fresh_catalog(api_stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    """A gateway over the same services whose model gateway lists none of the seeded ids."""
    async with (
        ModelGateway(models=FRESH_CATALOG) as models,
        gateway_with(api_stack, NINEROUTER_URL=models.url) as client,
    ):
        yield client


async def seeded_configuration(client: httpx.AsyncClient) -> None:
    settings = (await client.get("/api/settings/agent-runtime")).json()
    agents = {agent["id"]: agent["model"] for agent in (await client.get("/api/agents")).json()["agents"]}
    assert settings["defaultModel"] == SEEDED_DEFAULT
    assert agents == {"popagent": None, "researcher": None, "implementer": None, "reviewer": None}


@contextlib.asynccontextmanager
async def ninerouter_overrides(api_stack: Stack) -> AsyncIterator[None]:
    """The researcher's and reviewer's overrides of the 9Router preset for the block, set through the
    stack's own gateway (its catalog lists them), then cleared again (the stack is shared)."""
    async with api_stack.client() as own:
        try:
            for agent in ("researcher", "reviewer"):
                patched = await own.patch(f"/api/agents/{agent}", json={"model": SEEDED_OVERRIDE})
                assert patched.status_code == 200, patched.text
            yield
        finally:
            for agent in ("researcher", "reviewer"):
                assert (await own.patch(f"/api/agents/{agent}", json={"model": None})).status_code == 200


async def chat(client: httpx.AsyncClient, model: str | None = None) -> httpx.Response:
    session = await client.post("/api/sessions", json={"title": "configured models"})
    assert session.status_code == 201, session.text
    body: dict[str, Any] = {
        "id": session.json()["id"],
        "message": {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hello"}]},
    }
    if model is not None:
        body["model"] = model
    async with client.stream("POST", "/api/chat", json=body) as response:
        await response.aread()
    return response


async def test_a_fresh_catalog_without_the_seeded_ids_is_reported_on_models_and_agents(api_stack: Stack) -> None:
    async with fresh_catalog(api_stack) as client:
        await seeded_configuration(client)
        models = (await client.get("/api/models")).json()
        assert models["models"] == ["up/only"] and models["warning"] is None
        assert models["defaultModel"] == SEEDED_DEFAULT
        assert models["defaultModelListed"] is False
        # As seeded, only the default is unlisted: the specialists inherit it.
        assert [(u["setting"], u["agentId"]) for u in models["unlistedModels"]] == [("defaultModel", None)]
        assert (await client.get("/api/agents")).json()["unlistedModels"] == []
    async with ninerouter_overrides(api_stack), fresh_catalog(api_stack) as client:
        models = (await client.get("/api/models")).json()
        unlisted = {(u["setting"], u["resource"], u["agentId"], u["model"]) for u in models["unlistedModels"]}
        assert unlisted == {
            ("defaultModel", "/api/settings/agent-runtime", None, SEEDED_DEFAULT),
            ("model", "/api/agents/researcher", "researcher", SEEDED_OVERRIDE),
            ("model", "/api/agents/reviewer", "reviewer", SEEDED_OVERRIDE),
        }
        assert all("not listed by the model catalog" in u["message"] for u in models["unlistedModels"])

        agents = (await client.get("/api/agents")).json()
        assert agents["warning"] is None
        assert [(u["agentId"], u["setting"], u["model"]) for u in agents["unlistedModels"]] == [
            ("researcher", "model", SEEDED_OVERRIDE),
            ("reviewer", "model", SEEDED_OVERRIDE),
        ]


async def test_the_stack_catalog_lists_the_seeded_ids_so_nothing_is_reported(client: httpx.AsyncClient) -> None:
    models = (await client.get("/api/models")).json()
    assert models["defaultModelListed"] is True and models["unlistedModels"] == []
    assert (await client.get("/api/agents")).json()["unlistedModels"] == []


async def test_a_chat_without_model_on_an_unlisted_default_is_refused_naming_the_setting(api_stack: Stack) -> None:
    async with ninerouter_overrides(api_stack), fresh_catalog(api_stack) as client:
        refused = await chat(client)
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert f"default model {SEEDED_DEFAULT!r}" in error
        assert "defaultModel of /api/settings/agent-runtime" in error
        assert "send `model`" in error
        # The supervisor may delegate to the researcher or the reviewer: their overrides are named too.
        assert "agent 'researcher'" in error and "agent 'reviewer'" in error
        assert "agent 'implementer'" not in error


async def test_as_seeded_a_chat_with_a_listed_model_starts(api_stack: Stack) -> None:
    """The first message on a fresh gateway needs one choice, the model: no seeded override refuses it."""
    async with fresh_catalog(api_stack) as client:
        await seeded_configuration(client)
        started = await chat(client, "up/only")
        assert started.status_code == 200, started.text
        assert "x-popagent-warning" not in started.headers


async def test_a_chat_with_a_listed_model_is_refused_while_a_specialist_override_is_unlisted(
    api_stack: Stack,
) -> None:
    async with ninerouter_overrides(api_stack), fresh_catalog(api_stack) as client:
        refused = await chat(client, "up/only")
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert f"agent 'researcher''s model override {SEEDED_OVERRIDE!r} (model of /api/agents/researcher)" in error
        assert "/api/agents/reviewer" in error
        assert "defaultModel" not in error and "send `model`" not in error


async def test_an_ineligible_specialist_is_not_checked(api_stack: Stack) -> None:
    """Only agents the turn may run count: a specialist the supervisor cannot delegate to is not."""
    async with ninerouter_overrides(api_stack), fresh_catalog(api_stack) as client:
        try:
            for agent in ("researcher", "reviewer"):
                patched = await client.patch(f"/api/agents/{agent}", json={"delegationEligible": False})
                assert patched.status_code == 200, patched.text
            refused = await chat(client)
            assert refused.status_code == 400
            error = refused.json()["error"]
            assert "defaultModel" in error and "researcher" not in error
            # With a listed model and no eligible specialist on an unlisted override, the turn starts.
            started = await chat(client, "up/only")
            assert started.status_code == 200, started.text
            assert "x-popagent-warning" not in started.headers
        finally:
            for agent in ("researcher", "reviewer"):
                await client.patch(f"/api/agents/{agent}", json={"delegationEligible": True})
    async with fresh_catalog(api_stack) as client:
        await seeded_configuration(client)


async def test_a_catalog_outage_names_nothing_and_a_chat_fails_open_with_a_warning(api_stack: Stack) -> None:
    async with (
        ninerouter_overrides(api_stack),
        gateway_with(api_stack, NINEROUTER_URL=f"http://127.0.0.1:{free_port()}/v1") as client,
    ):
        models = (await client.get("/api/models")).json()
        assert "unavailable" in models["warning"]
        assert models["unlistedModels"] == [] and models["defaultModelListed"] is True
        agents = (await client.get("/api/agents")).json()
        assert agents["unlistedModels"] == [] and "unavailable" in agents["warning"]
        started = await chat(client)
        assert started.status_code == 200, started.text
        warning = started.headers["x-popagent-warning"]
        assert "not checked" in warning
        assert SEEDED_DEFAULT in warning and SEEDED_OVERRIDE in warning


async def test_a_supervisor_override_the_catalog_lacks_refuses_even_an_explicit_model(
    api_stack: Stack, client: httpx.AsyncClient
) -> None:
    """The supervisor runs on its override whatever the chat's `model`, so that override is checked too."""
    assert (await client.patch("/api/agents/popagent", json={"model": "fake/fake-chat"})).status_code == 200
    try:
        async with fresh_catalog(api_stack) as fresh:
            refused = await chat(fresh, "up/only")
            assert refused.status_code == 400, refused.text
            assert (
                "agent 'popagent''s model override 'fake/fake-chat' (model of /api/agents/popagent)"
                in (refused.json()["error"])
            )
            models = (await fresh.get("/api/models")).json()
            assert ("popagent", "fake/fake-chat") in {(u["agentId"], u["model"]) for u in models["unlistedModels"]}
    finally:
        assert (await client.patch("/api/agents/popagent", json={"model": None})).status_code == 200
