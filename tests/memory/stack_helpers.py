"""What the memory suites that drive the whole stack share."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx

LONG = (
    "Here is a long message about my week, with enough words that a few of them cross the smallest "
    "observation threshold: I visited Lisbon, met Ada, counted 1729 pigeons and wrote it all down. "
) * 3

# Observation in the turn, early: at 1,000 unobserved tokens, no background work, two raw messages kept.
OBSERVE_IN_TURN = {
    "observationMessageTokens": 1000,
    "asyncObservationEnabled": False,
    "asyncReflectionEnabled": False,
    "rawHistoryRetentionMessages": 2,
}


@contextlib.asynccontextmanager
async def memory_settings(client: httpx.AsyncClient, **changes: object) -> AsyncIterator[None]:
    """Memory settings changed for the block, then restored (the stack is shared)."""
    before = (await client.get("/api/settings/memory")).json()
    response = await client.patch("/api/settings/memory", json=changes)
    assert response.status_code == 200, response.text
    try:
        yield
    finally:
        restore = {key: before[key] for key in changes}
        assert (await client.patch("/api/settings/memory", json=restore)).status_code == 200
