"""Each process's exporter heartbeat in the store: its figures, its cadence, its last failed write."""

from __future__ import annotations

import asyncio
import os

import asyncpg
import pytest

from observability.test_retention import spans, store  # noqa: F401  (the store fixture)
from popagent_core.span_store import (
    FIRST_BEAT_S,
    IDLE_HEARTBEAT_S,
    STORE_SCHEMA,
    SpanStoreProcessor,
    SpanStoreWriter,
)


async def _rows(dsn: str) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn, server_settings={"search_path": STORE_SCHEMA})
    try:
        return await conn.fetch("SELECT * FROM popagent_exporters")
    finally:
        await conn.close()


async def test_the_heartbeat_carries_the_figures_often_while_they_change_and_seldom_when_idle(store: str) -> None:  # noqa: F811
    processor = SpanStoreProcessor()
    writer = SpanStoreWriter(store, processor, service="popagent-probe", heartbeat_interval_s=0.2)
    loop = asyncio.get_running_loop()
    try:
        # Nothing exported yet, just started: no heartbeat (an idle process holds no store connection).
        await writer.heartbeat_when_due(loop.time())
        assert writer.beat_at is None
        # A process that exports nothing beats FIRST_BEAT_S after start.
        await writer.heartbeat_when_due(loop.time() - FIRST_BEAT_S)
        [row] = await _rows(store)
        assert (row["service"], row["exported_spans"], row["queue_limit"]) == ("popagent-probe", 0, 4096)
        assert row["instance"].endswith(f":{os.getpid()}")

        # Spans exported: the next beat, one interval later, carries them.
        for span in spans(3, "s"):
            processor.on_end(span)
        await writer.flush()
        beat = writer.beat_at
        await writer.heartbeat_when_due(0.0)
        assert writer.beat_at == beat  # within the interval
        await asyncio.sleep(0.25)
        await writer.heartbeat_when_due(0.0)
        [row] = await _rows(store)
        assert row["exported_spans"] == 3 and row["seen_at"] > row["started_at"]

        # Unchanged figures: no beat until IDLE_HEARTBEAT_S has passed.
        beat = writer.beat_at
        await asyncio.sleep(0.25)
        await writer.heartbeat_when_due(0.0)
        assert writer.beat_at == beat
        assert writer.beat_at is not None
        writer.beat_at -= IDLE_HEARTBEAT_S
        await writer.heartbeat_when_due(0.0)
        assert writer.beat_at != beat
    finally:
        await writer.close()


async def test_a_failed_write_is_kept_in_the_heartbeat_after_export_resumes(store: str) -> None:  # noqa: F811
    processor = SpanStoreProcessor()
    down = SpanStoreWriter("postgresql://nobody@127.0.0.1:1/none", processor, service="popagent-probe")
    for span in spans(2, "lost"):
        processor.on_end(span)
    with pytest.raises(OSError):
        await down.flush()
    assert processor.stats.dropped == 2 and processor.stats.last_failure
    writer = SpanStoreWriter(store, processor, service="popagent-probe")
    try:
        for span in spans(1, "kept"):
            processor.on_end(span)
        await writer.flush()
        await writer.heartbeat()
        [row] = await _rows(store)
        assert (row["exported_spans"], row["dropped_spans"]) == (1, 2)
        assert row["last_error"] == processor.stats.last_failure and row["last_error_at"] is not None
        assert processor.stats.last_error == ""  # the live figure says the store answers again
    finally:
        await writer.close()
