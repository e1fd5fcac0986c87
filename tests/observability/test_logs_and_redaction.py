"""Logs carry trace and span ids; warnings reach the store bounded and redacted; the canary never leaves."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Awaitable, Callable

import asyncpg
import pytest
from opentelemetry import trace

from popagent_core.log import JsonFormatter
from popagent_core.span_store import (
    MAX_LOG_MESSAGE_CHARS,
    STORE_SCHEMA,
    Redactor,
    SpanStoreProcessor,
    SpanStoreWriter,
    StoredLogHandler,
    span_row,
)
from popagent_core.telemetry import TRACER
from popagent_dev.embedded import with_database
from support.canary import CANARY, CANARY_PREFIX, assert_no_canary
from support.stacks import API_STACK, Stack, StackSpec
from support.tracing import collecting_spans
from support.waiting import eventually


def test_a_json_log_line_carries_the_current_trace_and_span_ids() -> None:
    record = logging.LogRecord("popagent_test", logging.WARNING, __file__, 1, "inside", None, None)
    formatter = JsonFormatter("tests")
    with collecting_spans(), TRACER.start_as_current_span("work") as span:
        line = json.loads(formatter.format(record))
    context = span.get_span_context()
    assert line["trace_id"] == trace.format_trace_id(context.trace_id)
    assert line["span_id"] == trace.format_span_id(context.span_id)
    outside = json.loads(formatter.format(record))
    assert "span_id" not in outside


def test_stored_logs_are_warnings_bounded_and_redacted() -> None:
    processor = SpanStoreProcessor()
    handler = StoredLogHandler(processor, "popagent-tests", Redactor((CANARY,)), info_loggers=("popagent_chosen",))
    logger = logging.getLogger(f"popagent_test_{uuid.uuid4().hex[:6]}")
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    try:
        logger.info("an info line nobody selected")
        logger.warning(
            "leaked %s with Bearer abc.def and whsec_QUJDREVGR0g= then %s",
            CANARY,
            "x" * 5000,
            extra={"api_key": "sk-live-123456789", "detail": f"value {CANARY}"},
        )
    finally:
        logger.removeHandler(handler)
    chosen = logging.getLogger("popagent_chosen.part")
    chosen.addHandler(handler)
    chosen.propagate = False
    chosen.setLevel(logging.INFO)
    try:
        chosen.info("selected info")
    finally:
        chosen.removeHandler(handler)

    rows = processor.take_logs()
    assert [(row[1], row[3]) for row in rows] == [("warning", logger.name), ("info", "popagent_chosen.part")]
    message, attributes = rows[0][4], json.loads(rows[0][7])
    assert len(message) <= MAX_LOG_MESSAGE_CHARS + 1
    assert "[redacted]" in message and "abc.def" not in message and "QUJDREVGR0g" not in message
    assert attributes["api_key"] == "[redacted]"
    assert_no_canary(json.dumps([str(row) for row in rows]), where="stored logs")


@pytest.fixture
async def api_stack(started_stack: Callable[[StackSpec], Awaitable[Stack]]) -> Stack:
    return await started_stack(API_STACK)


async def test_the_canary_secret_never_reaches_a_span_or_the_store(api_stack: Stack, pg_dsn: str) -> None:
    """Storing and listing a secret whose value is the canary: every span of it (gateway, secrets, SQL) is clean."""
    stack = api_stack
    with collecting_spans() as spans:
        async with stack.client() as client:
            body = {"resourceId": "canary-spans", "name": f"c{uuid.uuid4().hex[:8]}", "value": CANARY}
            created = await client.post("/api/secrets", json=body)
            assert created.status_code in (200, 201), created.text
            listed = await client.get("/api/secrets")
            assert listed.status_code == 200
            assert CANARY_PREFIX not in listed.text
        await eventually(lambda: any(s.name.startswith("POST /api/secrets") for s in spans.all()), what="spans")
        recorded = spans.all()
    assert len(recorded) > 3
    rows = [span_row(span) for span in recorded]
    assert_no_canary(json.dumps([[str(value) for value in row] for row in rows]), where="span rows")

    # And through the writer into a store, as exported.
    name = f"popagent_obs_canary_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(pg_dsn)
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        processor = SpanStoreProcessor()
        for span in recorded:
            processor.on_end(span)
        writer = SpanStoreWriter(with_database(pg_dsn, name), processor)
        assert await writer.flush() == len(recorded)
        await writer.close()
        conn = await asyncpg.connect(with_database(pg_dsn, name), server_settings={"search_path": STORE_SCHEMA})
        try:
            dumped = await conn.fetchval("SELECT string_agg(t::text, E'\\n') FROM popagent_spans t")
        finally:
            await conn.close()
        assert_no_canary(dumped, where="the span store")
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()
