"""asyncio helpers."""

from __future__ import annotations

import asyncio


async def wait_event(event: asyncio.Event, seconds: float) -> bool:
    """Wait for `event` at most `seconds`; True if it is set.

    Unlike `asyncio.wait_for` on Python 3.11, a cancellation that arrives just as the
    event is set is never swallowed, so a loop built on this always stops when cancelled.
    """
    if event.is_set():
        return True
    waiter = asyncio.ensure_future(event.wait())
    try:
        done, _ = await asyncio.wait({waiter}, timeout=seconds)
    finally:
        waiter.cancel()
    return bool(done)
