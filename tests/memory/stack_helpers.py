"""What the memory suites that drive the whole stack share."""

from __future__ import annotations

import contextlib

import httpx
from chat.helpers import settings_changed

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


def memory_settings(client: httpx.AsyncClient, **changes: object) -> contextlib.AbstractAsyncContextManager[None]:
    """Memory settings changed for the block, then restored."""
    return settings_changed(client, "memory", **changes)
