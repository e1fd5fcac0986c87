"""Cost per message: the assistant message's usage carries `costUsd` when the catalog prices every
model call of the turn, and the usage roll-ups (the overview's tokens, `popagent_usage_daily`) sum it.

The scripted catalog prices one model (`PRICED_MODEL`, OpenRouter's `pricing` shape); agent-runner
reads the prices from the same `/models` the gateway's catalog does.
"""

from __future__ import annotations

import json
import math
from typing import Any

import asyncpg
import pytest
from chat.helpers import chat, new_session, of_type, thread_rows

from observability.helpers import reading_gateway
from popagent_agent_runner.llm.prices import ModelPrice, parse_prices
from popagent_core.span_store import active_stats
from support.model_gateway import ToolCall, Turn, Usage
from support.stacks import MODEL, PRICED_MODEL, PRICES, Stack
from support.tracing import collecting_spans
from support.waiting import eventually

IN, OUT = float(PRICES["prompt"]), float(PRICES["completion"])


def _usage_of_answer(chunks: list[Any]) -> dict[str, Any]:
    return of_type(chunks, "finish")[-1]["messageMetadata"]["usage"]


async def test_a_priced_turn_carries_its_cost_streamed_stored_and_rolled_up(chat_stack: Stack) -> None:
    stack = chat_stack
    stack.models.push(Turn.say("Priced answer.", usage=Usage(prompt_tokens=1000, completion_tokens=50)))
    async with reading_gateway(stack) as client:
        with collecting_spans():
            session = await new_session(client)
            chunks = await chat(client, session, "what does this cost?", model=PRICED_MODEL)
        expected = 1000 * IN + 50 * OUT
        streamed = _usage_of_answer(chunks)
        assert (streamed["inputTokens"], streamed["outputTokens"]) == (1000, 50)
        assert math.isclose(streamed["costUsd"], expected)
        stored = (await thread_rows(stack, session))[-1][2]["ui"]["metadata"]["usage"]
        assert math.isclose(stored["costUsd"], expected)

        # The model call's span carries it, and the overview's roll-up by model and agent sums it.
        async def priced_rows() -> list[dict[str, Any]]:
            overview = (await client.get("/api/observability/overview")).json()
            return [t for t in overview["tokens"] if t["model"] == PRICED_MODEL]

        rows: list[dict[str, Any]] = await eventually(priced_rows, what="the priced model's roll-up")
        assert sum(r["costUsd"] or 0 for r in rows) >= expected * 0.999
        stats = active_stats()
        assert stats is not None
        conn = await asyncpg.connect(stats.store_dsn, server_settings={"search_path": "observability"})
        try:
            daily = await conn.fetchval(
                "SELECT sum(cost_usd) FROM popagent_usage_daily WHERE session_id = $1 AND model = $2",
                session,
                PRICED_MODEL,
            )
        finally:
            await conn.close()
        assert daily is not None and math.isclose(daily, expected)


async def test_no_cost_when_a_model_of_the_turn_is_unpriced(chat_stack: Stack) -> None:
    stack = chat_stack
    # Unpriced supervisor model: no cost at all.
    stack.models.push(Turn.say("Free answer."))
    async with stack.client() as client:
        session = await new_session(client)
        chunks = await chat(client, session, "and this?")
        assert "costUsd" not in _usage_of_answer(chunks)
        assert "costUsd" not in (await thread_rows(stack, session))[-1][2]["ui"]["metadata"]["usage"]

        # A priced supervisor whose specialist runs on an unpriced model: a partial sum would read as
        # the whole, so the message has no cost either.
        stack.models.push(
            Turn.call(ToolCall("researcher", {"brief": "Look it up."}, id="call-d")),
            Turn.say("Specialist notes."),
            Turn.say("Done."),
        )
        session = await new_session(client)
        # The researcher on a model of its own, unpriced (agents inherit the chat's model unless overridden).
        assert (await client.patch("/api/agents/researcher", json={"model": MODEL})).status_code == 200
        try:
            chunks = await chat(client, session, "delegate it", model=PRICED_MODEL)
        finally:
            assert (await client.patch("/api/agents/researcher", json={"model": None})).status_code == 200
        models = [request["model"] for request in stack.models.requests[-3:]]
        assert models[0] == PRICED_MODEL and any(m != PRICED_MODEL for m in models)
        assert "costUsd" not in _usage_of_answer(chunks)


@pytest.mark.parametrize(
    ("pricing", "expected"),
    [
        ({"prompt": "0.000001", "completion": "0.000002"}, ModelPrice(1e-6, 2e-6)),
        ({"prompt": 1e-6, "completion": 0, "input_cache_read": "2.5e-7"}, ModelPrice(1e-6, 0.0, 2.5e-7)),
        ({"prompt": "-1", "completion": "-1"}, None),  # priced per request: no per-token price
        ({"prompt": "free"}, None),
        ("nope", None),
    ],
)
def test_catalog_prices_in_the_openrouter_shape(pricing: Any, expected: ModelPrice | None) -> None:
    raw = b'{"data": [{"id": "m/one", "pricing": %s}, {"id": "m/none"}]}' % json.dumps(pricing).encode()
    prices = parse_prices(raw)
    assert prices.get("m/one") == expected and "m/none" not in prices


def test_cached_input_is_charged_at_the_cache_price() -> None:
    price = ModelPrice(input=2e-6, output=1e-5, cached_input=5e-7)
    assert math.isclose(price.cost(1000, 10, cached_input_tokens=400), 600 * 2e-6 + 400 * 5e-7 + 10 * 1e-5)
    assert math.isclose(ModelPrice(2e-6, 1e-5).cost(1000, 10, 400), 1000 * 2e-6 + 10 * 1e-5)
