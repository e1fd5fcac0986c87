"""Retention of the observability store: old rows and rows over the cap go, after a write and once a day."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from observability.helpers import spans
from popagent_core.settings import ProcessSettings, Retention
from popagent_core.span_store import DAILY_S, STORE_SCHEMA, SpanStoreProcessor, SpanStoreWriter


async def test_old_rows_and_rows_over_the_cap_are_removed_after_a_write(store: str) -> None:
    processor = SpanStoreProcessor()
    writer = SpanStoreWriter(store, processor, retention=Retention(days=7, max_rows=3), retention_interval_s=3600)
    try:
        for span in spans(1, "first"):
            processor.on_end(span)
        await writer.flush()  # migrates the store, and the first write's pass finds nothing to remove
        conn = await asyncpg.connect(store, server_settings={"search_path": STORE_SCHEMA})
        try:
            old, recent = datetime.now(UTC) - timedelta(days=8), datetime.now(UTC) - timedelta(days=6)
            for trace_id, at in (("a" * 32, old), ("b" * 32, recent)):
                await conn.execute(
                    "INSERT INTO popagent_spans (trace_id, span_id, name, kind, service, started_at, ended_at,"
                    " duration_ms, status, attributes) VALUES ($1, 'span', 'old', 'internal', 't', $2, $2, 0, 'ok', '{}')",
                    trace_id,
                    at,
                )
                await conn.execute(
                    "INSERT INTO popagent_logs (logged_at, level, service, logger, message, attributes)"
                    " VALUES ($1, 'warning', 't', 't', $2, '{}')",
                    at,
                    trace_id,
                )
                await conn.execute(
                    "INSERT INTO popagent_feedback (id, created_at, rating, session_id, turn_id, trace_id)"
                    " VALUES ($1, $2, 'down', 's', 't', $1)",
                    trace_id,
                    at,
                )

            # Within the interval a write removes nothing.
            for span in spans(1, "second"):
                processor.on_end(span)
            await writer.flush()
            assert await conn.fetchval("SELECT count(*) FROM popagent_spans") == 4

            # Due: the 8-day-old rows go, and of the spans the newest 3 stay.
            writer.retained_at = None
            for span in spans(2, "third"):
                processor.on_end(span)
            await writer.flush()
            names = [r["name"] for r in await conn.fetch("SELECT name FROM popagent_spans ORDER BY started_at")]
            assert names == ["second-0", "third-0", "third-1"]
            assert [r["message"] for r in await conn.fetch("SELECT message FROM popagent_logs")] == ["b" * 32]
            assert [r["id"] for r in await conn.fetch("SELECT id FROM popagent_feedback")] == ["b" * 32]

            # The daily pass runs without writes, and only once a day.
            await conn.execute("UPDATE popagent_logs SET logged_at = now() - interval '9 days'")
            assert writer.retained_at is not None
            await writer.retain_when_due(DAILY_S)
            assert await conn.fetchval("SELECT count(*) FROM popagent_logs") == 1
            writer.retained_at -= DAILY_S + 1
            await writer.retain_when_due(DAILY_S)
            assert await conn.fetchval("SELECT count(*) FROM popagent_logs") == 0
        finally:
            await conn.close()
    finally:
        await writer.close()


def test_retention_is_configured_by_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POPAGENT_OBSERVABILITY_RETENTION_DAYS", "3")
    monkeypatch.setenv("POPAGENT_OBSERVABILITY_MAX_ROWS", "5000")
    settings = ProcessSettings(DATABASE_URL="postgresql://x@127.0.0.1/x")  # type: ignore[call-arg]
    assert settings.observability_retention == Retention(days=3, max_rows=5000)
    monkeypatch.setenv("POPAGENT_OBSERVABILITY_RETENTION_DAYS", "0")
    with pytest.raises(ValueError, match=r"POPAGENT_OBSERVABILITY_RETENTION_DAYS|observability_retention_days"):
        ProcessSettings(DATABASE_URL="postgresql://x@127.0.0.1/x")  # type: ignore[call-arg]
