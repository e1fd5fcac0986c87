"""The observability store: its own database, batched writes, drops counted while it is down."""

from __future__ import annotations

import uuid

import asyncpg
from chat.helpers import chat_in_a_new_session, thread_rows
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanContext

from popagent_core.span_store import STORE_SCHEMA, SpanStoreProcessor, SpanStoreWriter, active_stats
from popagent_dev.embedded import with_database
from support.model_gateway import ToolCall, Turn
from support.stacks import Stack
from support.tracing import collecting_spans
from support.waiting import eventually

RESEARCHER_MODEL = "cx/gpt-5.3-codex-spark"


def active_store() -> str:
    """The store this process exports to: the first stack's gateway started the one exporter of the process."""
    stats = active_stats()
    assert stats is not None and stats.store_dsn
    return stats.store_dsn


async def store_rows(dsn: str, query: str, *args: object) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn, server_settings={"search_path": STORE_SCHEMA})
    try:
        return await conn.fetch(query, *args)
    finally:
        await conn.close()


async def traced_turn(stack: Stack, message: str) -> tuple[str, SpanContext]:
    """One turn in a new session, its spans collected: the session and its `agent.run` span's context."""
    with collecting_spans() as spans:
        session, _ = await chat_in_a_new_session(stack, message)
        [turn] = await eventually(
            lambda: [
                s for s in spans.named("agent.run") if (s.attributes or {}).get("gen_ai.conversation.id") == session
            ],
            what="the turn's span",
        )
    assert turn.context is not None
    return session, turn.context


async def test_a_turns_spans_reach_the_store_and_nothing_reaches_the_application_database(chat_stack: Stack) -> None:
    stack = chat_stack
    store = active_store()
    assert store != stack.dsn
    stack.models.push(Turn.call(ToolCall("getTime", {}, id="call-t")), Turn.say("Noon."))
    session, turn = await traced_turn(stack, "time?")
    trace_id = f"{turn.trace_id:032x}"

    async def stored_names() -> set[str]:
        try:
            rows = await store_rows(store, "SELECT name FROM popagent_spans WHERE trace_id = $1", trace_id)
        except asyncpg.UndefinedTableError:  # the first writer has not migrated the store yet
            return set()
        return {row["name"] for row in rows}

    names = await eventually(stored_names, until=lambda n: {"agent.run", "model.generation", "tool.call"} <= n)
    assert "hook.dispatch" in names
    [row] = await store_rows(
        store,
        "SELECT session_id, agent_id, status, attributes FROM popagent_spans WHERE span_id = $1",
        f"{turn.span_id:016x}",
    )
    assert (row["session_id"], row["agent_id"], row["status"]) == (session, "popagent", "ok")

    # The application database holds no observability schema and no span anywhere.
    conn = await asyncpg.connect(stack.dsn)
    try:
        schemas = {r["nspname"] for r in await conn.fetch("SELECT nspname FROM pg_namespace")}
        span_tables = await conn.fetch("SELECT 1 FROM information_schema.tables WHERE table_name = 'popagent_spans'")
    finally:
        await conn.close()
    assert STORE_SCHEMA not in schemas
    assert span_tables == []
    stats = active_stats()
    assert stats is not None and stats.store_reachable and stats.exported > 0


def finished_spans(count: int) -> list:  # type: ignore[type-arg]
    provider = TracerProvider()
    collected: list = []  # type: ignore[type-arg]

    class Keep(SpanStoreProcessor):
        def on_end(self, span):  # type: ignore[no-untyped-def]
            collected.append(span)

    provider.add_span_processor(Keep())
    tracer = provider.get_tracer("test")
    for index in range(count):
        tracer.start_span(f"span-{index}", attributes={"gen_ai.agent.id": "popagent"}).end()
    return collected


def test_a_full_buffer_drops_and_counts_instead_of_waiting() -> None:
    processor = SpanStoreProcessor(max_queue=3)
    for span in finished_spans(5):
        processor.on_end(span)
    assert len(processor.buffer) == 3
    assert processor.stats.dropped == 2


async def test_the_writer_commits_without_waiting_for_the_disk(store: str) -> None:
    """Spans are telemetry: the store's server is spared a WAL flush per batch."""
    processor = SpanStoreProcessor()
    writer = SpanStoreWriter(store, processor)
    for span in finished_spans(2):
        processor.on_end(span)
    try:
        assert await writer.flush() == 2
        assert writer.pool is not None
        assert await writer.pool.fetchval("SHOW synchronous_commit") == "off"
    finally:
        await writer.close()


async def test_while_the_store_is_down_batches_are_dropped_and_counted_then_export_resumes(pg_dsn: str) -> None:
    name = f"popagent_obs_down_{uuid.uuid4().hex[:10]}"
    dsn = with_database(pg_dsn, name)  # not created yet: the store is "down"
    processor = SpanStoreProcessor(max_queue=100)
    writer = SpanStoreWriter(dsn, processor)
    for span in finished_spans(4):
        processor.on_end(span)
    try:
        await writer.flush()
    except Exception:
        pass
    else:
        raise AssertionError("a write to a missing store must fail")
    assert (processor.stats.dropped, processor.stats.exported, processor.stats.store_reachable) == (4, 0, False)
    assert "does not exist" in processor.stats.last_error

    admin = await asyncpg.connect(pg_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        try:
            for span in finished_spans(2):
                processor.on_end(span)
            assert await writer.flush() == 2
            await writer.close()
            rows = await store_rows(dsn, "SELECT name, agent_id FROM popagent_spans ORDER BY name")
            assert [(r["name"], r["agent_id"]) for r in rows] == [("span-0", "popagent"), ("span-1", "popagent")]
            assert (processor.stats.dropped, processor.stats.exported, processor.stats.last_error) == (4, 2, "")
        finally:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


async def test_a_failed_turns_warning_is_stored_with_its_trace(chat_stack: Stack) -> None:
    stack = chat_stack
    store = active_store()
    stack.models.push(Turn.fail(400, "bad request upstream"))
    _, turn = await traced_turn(stack, "fail please")
    trace_id = f"{turn.trace_id:032x}"

    async def stored() -> list[asyncpg.Record]:
        try:
            return await store_rows(
                store,
                "SELECT level, logger, message, span_id, attributes FROM popagent_logs WHERE trace_id = $1",
                trace_id,
            )
        except asyncpg.UndefinedTableError:
            return []

    rows = await eventually(stored, what="the turn's warning in the store")
    [row] = [r for r in rows if r["message"] == "turn failed"]
    assert row["level"] == "warning"
    assert row["span_id"] == f"{turn.span_id:016x}"
    assert '"session_id"' in row["attributes"]
    # The turn's span ends after its warning, so it may come in a later batch.
    spans_of_row = await eventually(
        lambda: store_rows(store, "SELECT name FROM popagent_spans WHERE span_id = $1", row["span_id"]),
        what="the span the warning was logged in",
    )
    assert [r["name"] for r in spans_of_row] == ["agent.run"]


async def test_the_assistant_message_names_its_trace_and_usage_rolls_up_per_session_agent_and_model(
    chat_stack: Stack,
) -> None:
    stack = chat_stack
    store = active_store()
    stack.models.push(
        Turn.call(ToolCall("researcher", {"brief": "Look."}, id="call-d")),
        Turn.say("Found it."),
        Turn.say("Done."),
    )
    # The researcher on a model of its own (an override the stack's catalog lists), so the rollup splits by model.
    async with stack.client() as client:
        assert (await client.patch("/api/agents/researcher", json={"model": RESEARCHER_MODEL})).status_code == 200
        try:
            with collecting_spans():
                session, chunks = await chat_in_a_new_session(stack, "go")
        finally:
            assert (await client.patch("/api/agents/researcher", json={"model": None})).status_code == 200
    trace_id = chunks[0]["messageMetadata"]["traceId"]
    stored = await thread_rows(stack, session)
    assert stored[-1][2]["ui"]["metadata"]["traceId"] == trace_id

    async def rollup() -> list[asyncpg.Record]:
        try:
            return await store_rows(
                store,
                "SELECT agent_id, model, calls, input_tokens, output_tokens FROM popagent_usage_daily"
                " WHERE session_id = $1 ORDER BY agent_id",
                session,
            )
        except asyncpg.UndefinedTableError:
            return []

    rows = await eventually(rollup, until=lambda r: len(r) == 2 and sum(x["calls"] for x in r) == 3)
    assert [(r["agent_id"], r["model"], r["calls"]) for r in rows] == [
        ("popagent", "fake/fake-chat", 2),
        ("researcher", RESEARCHER_MODEL, 1),
    ]
    assert all(r["input_tokens"] > 0 and r["output_tokens"] > 0 for r in rows)
