"""Model prices from the model gateway's catalog, and what a turn's model calls cost.

The catalog (`GET {NINEROUTER_URL}/models`) may price a model the way OpenRouter's does:
`{"data": [{"id": ..., "pricing": {"prompt": "0.000003", "completion": "0.000015",
"input_cache_read": "0.0000003"}}]}`, USD per token, as strings or numbers. A model with no
such entry, or with a negative figure (OpenRouter's "-1": priced per request), has no price,
and a turn that called one has no cost: a partial sum would read as the whole.

Never on a turn's path: `price()` answers from what the catalog reader (`llm.catalog`, shared with
the context windows) fetched, and starts a refresh in the background when that is stale (the
service warms it at start). The `model.generation`
span carries each priced call's cost (`popagent.usage.cost_usd`, summed by the usage roll-up) and
the turn's tally (`counting_cost`) gives the assistant message's `usage.costUsd`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import orjson

from popagent_agent_runner.llm.catalog import ModelCatalog


@dataclass(frozen=True, slots=True)
class ModelPrice:
    """USD per token; `cached_input` for input served from the provider's cache (None: the input price)."""

    input: float
    output: float
    cached_input: float | None = None

    def cost(self, input_tokens: int, output_tokens: int, cached_input_tokens: int = 0) -> float:
        """The call's cost; `input_tokens` includes the cached ones, as OpenAI-compatible usage reports it."""
        cached = min(max(cached_input_tokens, 0), max(input_tokens, 0))
        cached_price = self.input if self.cached_input is None else self.cached_input
        return (input_tokens - cached) * self.input + cached * cached_price + output_tokens * self.output


def _per_token(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) and number >= 0 else None


def parse_prices(raw: bytes) -> dict[str, ModelPrice]:
    """The priced models of an OpenAI-compatible `/models` answer; ValueError if it is not one."""
    body = orjson.loads(raw)
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        raise ValueError("answer has no data list")
    return prices_of([entry for entry in data if isinstance(entry, dict)])


def prices_of(entries: list[dict[str, Any]]) -> dict[str, ModelPrice]:
    """The priced models among a catalog's entries."""
    prices: dict[str, ModelPrice] = {}
    for entry in entries:
        if not isinstance(entry.get("id"), str):
            continue
        pricing = entry.get("pricing")
        if not isinstance(pricing, dict):
            continue
        prompt, completion = _per_token(pricing.get("prompt")), _per_token(pricing.get("completion"))
        if prompt is None or completion is None:
            continue
        prices[entry["id"]] = ModelPrice(prompt, completion, _per_token(pricing.get("input_cache_read")))
    return prices


class ModelPrices:
    """The catalog's prices, as the process's one catalog reader last fetched them."""

    def __init__(self, catalog: ModelCatalog) -> None:
        self._catalog = catalog
        self._prices: dict[str, ModelPrice] = {}
        self._version = 0

    def price(self, model: str) -> ModelPrice | None:
        """The model's price as last fetched; a stale catalog starts a refresh (for the next calls)."""
        entries = self._catalog.cached()
        if self._catalog.version != self._version and entries is not None:
            self._prices, self._version = prices_of(entries), self._catalog.version
        return self._prices.get(model)

    def refresh_soon(self) -> None:
        self._catalog.refresh_soon()


class CostTally:
    """What a turn's model calls cost (its specialists' included): whole only when every call was priced."""

    __slots__ = ("priced", "total_usd", "unpriced")

    def __init__(self) -> None:
        self.total_usd = 0.0
        self.priced = 0
        self.unpriced = 0

    def add(self, cost_usd: float | None) -> None:
        if cost_usd is None:
            self.unpriced += 1
        else:
            self.priced += 1
            self.total_usd += cost_usd

    @property
    def cost_usd(self) -> float | None:
        return self.total_usd if self.priced and not self.unpriced else None


turn_cost: ContextVar[CostTally | None] = ContextVar("turn_cost", default=None)


@contextmanager
def counting_cost() -> Iterator[CostTally]:
    """Tally the model calls made in the block (and in the tasks it starts) into one `CostTally`."""
    tally = CostTally()
    token = turn_cost.set(tally)
    try:
        yield tally
    finally:
        turn_cost.reset(token)
