"""Reading a server-sent event stream as the AI SDK's client does."""

from __future__ import annotations

import json
from typing import Any

import httpx


async def read_sse(response: httpx.Response) -> list[Any]:
    """Every `data:` payload of the stream in order: JSON chunks decoded, `[DONE]` as the string."""
    chunks: list[Any] = []
    async for line in response.aiter_lines():
        if line.startswith("data: "):
            payload = line.removeprefix("data: ")
            chunks.append(payload if payload == "[DONE]" else json.loads(payload))
    return chunks
