"""The model gateway's catalog answer (`GET {NINEROUTER_URL}/models`), read one way by every process.

An OpenAI-compatible model list: 9Router answers
`{"data": [{"id", "context_length", "capabilities": {"contextWindow"}}]}`; other gateways may
report neither window. The gateway lists the models from it; agent-runner prices calls and
holds prompts to the context windows from the same entries.
"""

from __future__ import annotations

from typing import Any

import orjson

MAX_CATALOG_BYTES = 4 * 1024 * 1024


def catalog_entries(raw: bytes, *, limit: int | None = None) -> list[dict[str, Any]]:
    """The entries of a `/models` answer (of its first `limit`) that are objects with a string id.

    ValueError when the answer is too large, is not JSON (`orjson.JSONDecodeError` is one) or has
    no `data` list.
    """
    if len(raw) > MAX_CATALOG_BYTES:
        raise ValueError("catalog answer too large")
    body = orjson.loads(raw)
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        raise ValueError("answer has no data list")
    return [entry for entry in data[:limit] if isinstance(entry, dict) and isinstance(entry.get("id"), str)]


def context_window(entry: dict[str, Any]) -> int | None:
    """An entry's context window in tokens: `context_length`, else `capabilities.contextWindow`; None: neither."""
    capabilities = entry.get("capabilities")
    for value in (
        entry.get("context_length"),
        capabilities.get("contextWindow") if isinstance(capabilities, dict) else None,
    ):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None
