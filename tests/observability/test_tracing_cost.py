"""What keeps tracing cheap on a turn's path: one span per storage transaction of a turn, no spans for
transaction statements or for statements outside a trace, bounded stored attributes, a writer that
yields to the event loop, and no httpx instrumentation where no HTTP is made."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import asyncpg
from chat.helpers import chat_in_a_new_session, thread_rows
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.trace import SpanKind, StatusCode

from popagent_core.db import load_queries
from popagent_core.span_store import MAX_ATTRIBUTE_CHARS, ROWS_PER_SLICE, SpanStoreProcessor, _rows_yielding, span_row
from popagent_core.telemetry import TRACER, TRANSACTION_STATEMENTS
from support.model_gateway import Turn
from support.stacks import Stack
from support.tracing import collecting_spans, sampler_questions
from support.waiting import eventually


async def test_a_transaction_records_its_statements_but_not_begin_and_commit(pg_dsn: str) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        with collecting_spans() as spans, TRACER.start_as_current_span("unit-of-work") as parent:
            async with conn.transaction():
                await conn.fetchval("SELECT 1")
                await conn.execute("SELECT 2")
    finally:
        await conn.close()
    trace_id = parent.get_span_context().trace_id
    names = [s.name for s in spans.of_trace(trace_id)]
    assert names.count("SELECT") == 2 and "unit-of-work" in names
    assert not {"BEGIN;", "COMMIT;", "BEGIN", "COMMIT"} & set(names)


async def test_a_named_querys_span_says_its_name(pg_dsn: str, tmp_path: Path) -> None:
    """A named query's span is `<operation> <name>`, not `WITH` or `SELECT` for every query alike."""
    (tmp_path / "q.sql").write_text(
        "-- name: numbers_below\n-- A common table expression, as the trace list's own query.\n"
        "WITH n AS (SELECT generate_series(1, $1) AS v) SELECT count(*) FROM n\n\n"
        "-- name: one\nSELECT 1\n"
    )
    queries = load_queries(tmp_path / "q.sql")
    conn = await asyncpg.connect(pg_dsn)
    try:
        with collecting_spans() as spans, TRACER.start_as_current_span("unit-of-work") as parent:
            assert await conn.fetchval(queries["numbers_below"], 3) == 3
            assert await conn.fetchval(queries["one"]) == 1
            assert await conn.fetchval("SELECT 2") == 2
    finally:
        await conn.close()
    names = [s.name for s in spans.of_trace(parent.get_span_context().trace_id) if s.name != "unit-of-work"]
    assert names == ["WITH numbers_below", "SELECT one", "SELECT"]


async def test_statements_no_span_could_record_are_not_turned_into_spans(pg_dsn: str) -> None:
    """A background loop's polling and the transaction statements are never recorded: the asyncpg
    instrumentation hands them straight to asyncpg instead of building a span for the sampler to drop."""
    conn = await asyncpg.connect(pg_dsn)
    try:
        with collecting_spans(), sampler_questions() as asked:
            await conn.fetchval("SELECT 1")  # outside any trace
            with TRACER.start_as_current_span("unit-of-work"):
                async with conn.transaction():
                    await conn.fetchval("SELECT 2")
    finally:
        await conn.close()
    # Only this test's spans: another suite's stack in this process may start spans meanwhile.
    ours = [question for question in asked if question[0] in {"unit-of-work", "SELECT", *TRANSACTION_STATEMENTS}]
    assert ours == [("unit-of-work", SpanKind.INTERNAL), ("SELECT", SpanKind.CLIENT)]


def test_a_stored_attribute_is_cut_to_its_bound() -> None:
    provider = TracerProvider()
    processor = SpanStoreProcessor()
    provider.add_span_processor(processor)
    query = "SELECT " + "x, " * 5000
    with provider.get_tracer("t").start_as_current_span("SELECT", attributes={"db.statement": query, "n": 3}):
        pass
    [span] = processor.take()
    attributes = span_row(span)[11]
    assert len(attributes) < MAX_ATTRIBUTE_CHARS + 100 and '"n":3' in attributes
    assert query not in attributes and query[:MAX_ATTRIBUTE_CHARS] in attributes


async def test_the_writer_yields_to_the_loop_while_it_turns_a_big_batch_into_rows() -> None:
    provider = TracerProvider()
    processor = SpanStoreProcessor(10_000)
    provider.add_span_processor(processor)
    for _ in range(ROWS_PER_SLICE * 4):
        with provider.get_tracer("t").start_as_current_span("s"):
            pass
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    before = ticks
    rows = await _rows_yielding(processor.take())
    task.cancel()
    assert len(rows) == ROWS_PER_SLICE * 4
    assert ticks - before >= 3  # another task ran between the slices


def test_a_process_that_loaded_no_httpx_does_not_instrument_it() -> None:
    code = (
        "import sys\n"
        "from popagent_core.telemetry import configure_telemetry\n"
        "assert configure_telemetry('probe') is not None\n"
        "print('httpx' in sys.modules, 'opentelemetry.instrumentation.httpx' in sys.modules,"
        " 'opentelemetry.instrumentation.asyncpg' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.split() == ["False", "False", "True"], out.stdout + out.stderr
    with_httpx = subprocess.run(
        [sys.executable, "-c", "import httpx\n" + code], capture_output=True, text=True, check=True, timeout=60
    )
    assert with_httpx.stdout.split() == ["True", "True", "True"], with_httpx.stdout + with_httpx.stderr


async def test_a_turn_stores_its_prompt_and_answer_under_one_span_each(chat_stack: Stack) -> None:
    stack = chat_stack
    stack.models.push(Turn.say("Stored in two transactions."))
    with collecting_spans() as spans:
        session, chunks = await chat_in_a_new_session(stack, "store me")
        trace_id = int(
            next(c for c in chunks if isinstance(c, dict) and c.get("type") == "start")["messageMetadata"]["traceId"],
            16,
        )

        def stored() -> list[ReadableSpan]:
            return [s for s in spans.of_trace(trace_id) if s.name in ("db.begin_turn", "db.commit_turn")]

        units = await eventually(stored, until=lambda found: len(found) == 2, what="the turn's two storage spans")
    assert sorted(s.name for s in units) == ["db.begin_turn", "db.commit_turn"]
    assert all(s.status.status_code is not StatusCode.ERROR for s in units)
    unit_ids = {s.context.span_id for s in units if s.context is not None}
    # Their statements make no span of their own; the turn's other queries (its prelude) still do.
    in_trace = spans.of_trace(trace_id)
    assert not [s for s in in_trace if s.parent is not None and s.parent.span_id in unit_ids]
    assert any((s.attributes or {}).get("db.statement") for s in in_trace)
    rows = await thread_rows(stack, session)
    assert [role for _, role, _ in rows][-2:] == ["user", "assistant"]
