"""A turn's SSE stream stays alive through quiet stretches: a comment every interval in which the
turn sent nothing, and nothing left running when the client goes away."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

from popagent_gateway.streaming import HEARTBEAT, with_heartbeats


async def test_a_quiet_stream_gets_heartbeats_and_its_data_in_order() -> None:
    async def quiet_then_talks() -> AsyncGenerator[bytes, None]:
        yield b"data: 1\n\n"
        await asyncio.sleep(0.35)
        yield b"data: 2\n\n"
        yield b"data: [DONE]\n\n"

    received = [data async for data in with_heartbeats(quiet_then_talks(), interval_s=0.1)]
    assert received[0] == b"data: 1\n\n" and received[-2:] == [b"data: 2\n\n", b"data: [DONE]\n\n"]
    assert received[1:-2] == [HEARTBEAT] * len(received[1:-2]) and 2 <= len(received[1:-2]) <= 4
    assert HEARTBEAT.startswith(b":")  # an SSE comment: parsers skip it


async def test_a_stream_that_never_pauses_gets_no_heartbeat() -> None:
    async def busy() -> AsyncGenerator[bytes, None]:
        for n in range(50):
            await asyncio.sleep(0.01)
            yield b"data: %d\n\n" % n

    received = [data async for data in with_heartbeats(busy(), interval_s=0.1)]
    assert HEARTBEAT not in received and len(received) == 50


async def test_closing_the_stream_mid_wait_closes_the_turns_body() -> None:
    closed = asyncio.Event()

    async def waits_forever() -> AsyncGenerator[bytes, None]:
        try:
            yield b"data: 1\n\n"
            await asyncio.Event().wait()
            yield b"never"
        finally:
            closed.set()

    stream = with_heartbeats(waits_forever(), interval_s=0.05)
    assert await anext(stream) == b"data: 1\n\n"
    assert await anext(stream) == HEARTBEAT
    await stream.aclose()
    assert closed.is_set()
