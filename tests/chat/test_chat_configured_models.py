"""A chat turn on the persisted default model and the specialists' overrides, checked against the catalog.

The chat stack's agent-runner answers from the scripted model server, which serves every
id; a second gateway in front of the same workers reads its catalog from another model
server that lists only `fake/fake-chat`, as a fresh model gateway would (not the seeded
default, a 9Router id, nor the 9Router preset's specialist overrides). Its refusals come
before the turn: no model request, no stored message.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx

from chat.helpers import chat, new_session, text_of, thread_rows
from popagent_dev.embedded import free_port
from support.model_gateway import ModelGateway, ModelInfo, Turn
from support.stacks import API_KEY, MODEL, Stack

NINEROUTER_OVERRIDE = "cx/gpt-5.3-codex-spark"


@contextlib.asynccontextmanager
async def gateway_with_catalog(stack: Stack, catalog_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """Another gateway over the stack's agent-runner workers, with its model catalog at `catalog_url`."""
    async with (
        stack.extra_gateway(NINEROUTER_URL=catalog_url) as url,
        httpx.AsyncClient(base_url=url, headers={"x-popagent-key": API_KEY}, timeout=30.0) as client,
    ):
        yield client


@contextlib.asynccontextmanager
async def fresh_catalog(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with ModelGateway(models=(ModelInfo(MODEL),)) as catalog, gateway_with_catalog(stack, catalog.url) as client:
        yield client


async def test_a_chat_without_model_on_an_unlisted_default_is_a_400_before_the_turn(stack: Stack) -> None:
    async with fresh_catalog(stack) as client:
        session = await new_session(client)
        [body] = await chat(client, session, "hi", model=None, expect_status=400)
    assert "the default model 'cx/gpt-5.3-codex' (defaultModel of /api/settings/agent-runtime)" in body["error"]
    assert "not listed by the model catalog" in body["error"]
    assert stack.models.requests == []
    assert stack.hook_requests("UserPromptSubmit") == []
    assert await thread_rows(stack, session) == []


async def test_on_the_seeded_configuration_a_listed_model_answers_the_first_message(stack: Stack) -> None:
    """The specialists inherit the default model: picking a listed model is the only choice a first chat needs."""
    async with fresh_catalog(stack) as client:
        session = await new_session(client)
        stack.models.push(Turn.say("Hello on the picked model."))
        chunks = await chat(client, session, "hi", model=MODEL)
    assert text_of(chunks) == "Hello on the picked model."
    [request] = stack.models.requests
    assert request["model"] == MODEL


async def test_a_specialist_override_the_catalog_lacks_refuses_the_turn_until_it_is_cleared(stack: Stack) -> None:
    # The 9Router preset's specialist override, set through the stack's own gateway (its catalog lists it).
    async with stack.client() as own:
        for agent in ("researcher", "reviewer"):
            preset = await own.patch(f"/api/agents/{agent}", json={"model": NINEROUTER_OVERRIDE})
            assert preset.status_code == 200, preset.text
    try:
        async with fresh_catalog(stack) as client:
            session = await new_session(client)
            [body] = await chat(client, session, "hi", model=MODEL, expect_status=400)
            assert f"agent 'researcher''s model override {NINEROUTER_OVERRIDE!r}" in body["error"]
            assert "agent 'reviewer''s model override" in body["error"]
            assert stack.models.requests == []
            for agent in ("researcher", "reviewer"):
                assert (await client.patch(f"/api/agents/{agent}", json={"model": None})).status_code == 200
            assert (await client.get("/api/agents")).json()["unlistedModels"] == []
            stack.models.push(Turn.say("Hello on a listed model."))
            chunks = await chat(client, session, "hi again", model=MODEL)
            assert text_of(chunks) == "Hello on a listed model."
    finally:
        async with stack.client() as own:
            for agent in ("researcher", "reviewer"):
                assert (await own.patch(f"/api/agents/{agent}", json={"model": None})).status_code == 200


async def test_a_catalog_outage_runs_the_turn_on_the_default_with_a_warning(stack: Stack) -> None:
    async with gateway_with_catalog(stack, f"http://127.0.0.1:{free_port()}/v1") as client:
        session = await new_session(client)
        stack.models.push(Turn.say("Answered on the unchecked default."))
        body = {"id": session, "message": {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}}
        async with client.stream("POST", "/api/chat", json=body) as response:
            assert response.status_code == 200
            warning = response.headers["x-popagent-warning"]
            await response.aread()
    assert "not checked" in warning and "'cx/gpt-5.3-codex'" in warning
    [request] = stack.models.requests
    assert request["model"] == "cx/gpt-5.3-codex"
    assert "Answered on the unchecked default." in response.text
