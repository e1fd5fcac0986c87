"""popagent_hook_runs: bounded rows, retention after writes and daily, deletion (RPC and NATS), isolation."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import grpc
import pytest
from hooks.helpers import HOOKS_MIGRATIONS, document, handler, running_service, service_env
from nats.aio.client import Client as NatsClient

from popagent.events.v1 import events_pb2
from popagent.hooks.v1 import hooks_pb2, hooks_pb2_grpc
from popagent_core import bus, subjects
from popagent_core.db import open_pool
from popagent_core.migrate import migrate
from popagent_dev.embedded import NatsProcess
from popagent_hooks.audit import SESSION_CAP, AuditRepo, HookRun
from popagent_hooks.service import MIGRATIONS
from popagent_hooks_client.events import Event, FailureClass, Outcome
from support.https_receiver import HttpsReceiver, Reply, answer, closed_port
from support.waiting import eventually

DatabaseFactory = Callable[..., Awaitable[str]]
NOW = datetime.now(UTC)


def record(session_id: str, n: int, *, age: timedelta = timedelta(0), turn: str = "turn") -> HookRun:
    return HookRun(
        event=Event.PRE_TOOL_USE,
        handler_id="h",
        outcome=Outcome.PASS,
        failure_class=None,
        duration_ms=n,
        session_id=session_id,
        turn_id=f"{turn}-{n // 10}",
        tool_call_id=f"call-{n}",
        target="webSearch",
        event_id=f"event-{n}",
        reason="",
        created_at=NOW - age + timedelta(milliseconds=n),
        signed=True,
    )


@pytest.fixture
async def hooks_dsn(make_database: DatabaseFactory) -> str:
    return await make_database(HOOKS_MIGRATIONS)


@pytest.fixture
async def repo(hooks_dsn: str) -> AsyncIterator[AuditRepo]:
    async with open_pool(hooks_dsn, "hooks") as pool:
        yield AuditRepo(pool)


async def test_each_session_keeps_its_newest_500_rows_after_writes(repo: AuditRepo, hooks_dsn: str) -> None:
    await repo.write([record("s1", n) for n in range(300)])
    await repo.write([record("s1", n) for n in range(300, 505)])
    await repo.write([record("s2", n) for n in range(3)])
    # Stored rows, not just the listing (which is limited to 500 on its own).
    assert await _row_count(hooks_dsn) == SESSION_CAP + 3
    runs = await repo.list_session("s1")
    assert [r.run.duration_ms for r in runs] == list(range(5, 505))
    assert len(await repo.list_session("s2")) == 3


async def test_a_written_record_reads_back_as_the_same_typed_record(repo: AuditRepo) -> None:
    failed = dataclasses.replace(
        record("s1", 1), outcome=Outcome.DENY, failure_class=FailureClass.TIMEOUT, reason="hook h failed (timeout)"
    )
    bare = dataclasses.replace(record("s1", 2), turn_id="", tool_call_id="", target="")
    await repo.write([failed, bare])
    stored = await repo.list_session("s1")
    assert [s.run for s in stored] == [failed, bare]
    assert stored[0].id < stored[1].id


async def test_an_ask_row_is_stored_and_reads_back(make_database: DatabaseFactory, tmp_path: Path) -> None:
    """Migration 0003 lets the outcome check admit `ask` on a table that already holds rows."""
    dsn = await make_database()
    for name in ("0001_hook_runs.sql", "0002_hook_runs_signed.sql"):
        (tmp_path / name).write_text((MIGRATIONS / name).read_text())
    await migrate(dsn, "hooks", tmp_path)
    await _insert_directly(dsn, "s1", 1, age=timedelta(0))
    await migrate(dsn, "hooks", MIGRATIONS)
    asked = dataclasses.replace(record("s1", 5), outcome=Outcome.ASK, reason="a person confirms purchases")
    async with open_pool(dsn, "hooks") as pool:
        repo = AuditRepo(pool)
        await repo.write([asked])
        assert [s.run for s in await repo.list_session("s1")][1:] == [asked]
    conn = await asyncpg.connect(dsn, server_settings={"search_path": "hooks"})
    try:
        with pytest.raises(asyncpg.CheckViolationError):
            await conn.execute(
                "INSERT INTO popagent_hook_runs (event, handler_id, outcome, duration_ms, event_id, reason, created_at,"
                " signed) VALUES ('Stop', 'h', 'maybe', 1, 'e', '', now(), true)"
            )
    finally:
        await conn.close()


async def test_rows_from_before_optional_secrets_read_as_signed(make_database: DatabaseFactory, tmp_path: Path) -> None:
    """Migration 0002 adds `signed`: older rows had a required secret, so they were signed."""
    dsn = await make_database()
    (tmp_path / "0001_hook_runs.sql").write_text((MIGRATIONS / "0001_hook_runs.sql").read_text())
    await migrate(dsn, "hooks", tmp_path)
    await _insert_directly(dsn, "s1", 1, age=timedelta(0), signed=None)
    await migrate(dsn, "hooks", MIGRATIONS)
    async with open_pool(dsn, "hooks") as pool:
        repo = AuditRepo(pool)
        await repo.write([dataclasses.replace(record("s1", 5), signed=False)])
        assert [r.run.signed for r in await repo.list_session("s1")] == [True, False]


async def test_rows_older_than_30_days_are_removed_after_writes(repo: AuditRepo) -> None:
    await repo.write([record("s1", 1, age=timedelta(days=29))])
    await repo.write([record("s1", 2, age=timedelta(days=30, minutes=1)), record("s2", 3)])
    assert [r.run.duration_ms for r in await repo.list_session("s1")] == [1]


async def test_daily_maintenance_applies_both_bounds_to_every_session(repo: AuditRepo, hooks_dsn: str) -> None:
    await _insert_directly(hooks_dsn, "s1", 520, age=timedelta(0))
    await _insert_directly(hooks_dsn, "s2", 5, age=timedelta(days=31))
    await _insert_directly(hooks_dsn, "s3", 5, age=timedelta(days=1))
    assert await repo.maintain() == (5, 20)
    assert len(await repo.list_session("s1")) == SESSION_CAP
    assert await repo.list_session("s2") == []
    assert len(await repo.list_session("s3")) == 5


async def test_listing_returns_the_latest_500_in_chronological_order(repo: AuditRepo, hooks_dsn: str) -> None:
    await _insert_directly(hooks_dsn, "s1", 600, age=timedelta(0))
    runs = await repo.list_session("s1")
    assert len(runs) == 500
    assert [r.run.duration_ms for r in runs] == list(range(100, 600))
    assert [r.run.created_at for r in runs] == sorted(r.run.created_at for r in runs)


async def _insert_directly(
    dsn: str, session_id: str, count: int, age: timedelta, *, signed: bool | None = True
) -> None:
    """Rows written with SQL; `signed=None` writes them as a schema without the column would."""
    columns = "event, handler_id, outcome, duration_ms, session_id, turn_id, event_id, reason, created_at"
    values = "'Stop', 'h', 'pass', $1, $2, 't', 'e', '', $3"
    if signed is not None:
        columns, values = f"{columns}, signed", f"{values}, {'true' if signed else 'false'}"
    conn = await asyncpg.connect(dsn, server_settings={"search_path": "hooks"})
    try:
        await conn.executemany(
            f"INSERT INTO popagent_hook_runs ({columns}) VALUES ({values})",
            [(n, session_id, NOW - age + timedelta(milliseconds=n)) for n in range(count)],
        )
    finally:
        await conn.close()


async def _alter_table(dsn: str, name: str, new_name: str) -> None:
    conn = await asyncpg.connect(dsn, server_settings={"search_path": "hooks"})
    try:
        await conn.execute(f"ALTER TABLE {name} RENAME TO {new_name}")
    finally:
        await conn.close()


async def _row_count(dsn: str) -> int:
    conn = await asyncpg.connect(dsn, server_settings={"search_path": "hooks"})
    try:
        return await conn.fetchval("SELECT count(*) FROM popagent_hook_runs")
    finally:
        await conn.close()


# --- through the running service ---------------------------------------------------------------


def _dispatch(session_id: str, turn_id: str, detail: bytes = b'{"arguments": {}}') -> hooks_pb2.DispatchRequest:
    return hooks_pb2.DispatchRequest(
        event=hooks_pb2.PRE_TOOL_USE,
        session_id=session_id,
        turn_id=turn_id,
        tool_call_id="call",
        target="webSearch",
        detail_json=detail,
    )


async def test_audit_rows_hold_decisions_but_never_payloads(
    hooks_dsn: str, nats_url: str, internal_credentials: tuple[dict[str, str], str], receiver: HttpsReceiver
) -> None:
    tokens, callers = internal_credentials
    receiver.script("/deny", answer("deny", reason="blocked by policy"))
    hooks = document(PreToolUse=[handler("policy", receiver.url("/deny"))])
    async with running_service(service_env(hooks_dsn, nats_url, callers, receiver, hooks), tokens["agent-runner"]) as (
        _,
        channel,
    ):
        stub = hooks_pb2_grpc.HooksServiceStub(channel)
        canary = b'{"arguments": {"text": "payload-canary-7731"}, "transcript": "transcript-canary-7731"}'
        await stub.Dispatch(_dispatch("s1", "turn-1", canary))
        runs = (await stub.ListSessionRuns(hooks_pb2.ListSessionRunsRequest(session_id="s1"))).runs
    assert [(r.handler_id, r.outcome, r.reason, r.turn_id, r.target) for r in runs] == [
        ("policy", hooks_pb2.DENY, "blocked by policy", "turn-1", "webSearch")
    ]
    conn = await asyncpg.connect(hooks_dsn, server_settings={"search_path": "hooks"})
    try:
        dumped = await conn.fetchval("SELECT string_agg(row_to_json(r)::text, '') FROM popagent_hook_runs r")
    finally:
        await conn.close()
    assert "blocked by policy" in dumped
    assert "canary" not in dumped


async def test_session_rows_are_removed_by_the_delete_rpc(
    hooks_dsn: str, nats_url: str, internal_credentials: tuple[dict[str, str], str], receiver: HttpsReceiver
) -> None:
    tokens, callers = internal_credentials
    receiver.script("/ok", answer())
    hooks = document(PreToolUse=[handler("ok", receiver.url("/ok"))])
    async with running_service(service_env(hooks_dsn, nats_url, callers, receiver, hooks), tokens["agent-runner"]) as (
        _,
        channel,
    ):
        stub = hooks_pb2_grpc.HooksServiceStub(channel)
        for session in ("gone", "gone", "kept"):
            await stub.Dispatch(_dispatch(session, "t"))
        # Deleting right after dispatching also removes rows still queued for writing.
        deleted = await stub.DeleteSessionRuns(hooks_pb2.DeleteSessionRunsRequest(session_id="gone"))
        assert deleted.deleted == 2
        assert (await stub.ListSessionRuns(hooks_pb2.ListSessionRunsRequest(session_id="gone"))).runs == []
        assert len((await stub.ListSessionRuns(hooks_pb2.ListSessionRunsRequest(session_id="kept"))).runs) == 1
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.DeleteSessionRuns(hooks_pb2.DeleteSessionRunsRequest(session_id=""))
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_session_rows_are_removed_when_the_session_deleted_event_arrives(
    hooks_dsn: str,
    nats_server: NatsProcess,
    internal_credentials: tuple[dict[str, str], str],
    receiver: HttpsReceiver,
) -> None:
    tokens, callers = internal_credentials
    receiver.script("/ok", answer())
    hooks = document(PreToolUse=[handler("ok", receiver.url("/ok"))])
    env = service_env(hooks_dsn, nats_server.url, callers, receiver, hooks)
    async with (
        bus.connect(nats_server.url, name="test-agent-runner") as nc,
        running_service(env, tokens["agent-runner"]) as (_, channel),
    ):
        stub = hooks_pb2_grpc.HooksServiceStub(channel)
        await stub.Dispatch(_dispatch("deleted-session", "t"))
        await stub.Dispatch(_dispatch("other-session", "t"))
        assert (
            len((await stub.ListSessionRuns(hooks_pb2.ListSessionRunsRequest(session_id="deleted-session"))).runs) == 1
        )
        await _publish_session_deleted(nc, "deleted-session")

        async def deleted_runs() -> list[hooks_pb2.HookRun]:
            request = hooks_pb2.ListSessionRunsRequest(session_id="deleted-session")
            return list((await stub.ListSessionRuns(request)).runs)

        await eventually(deleted_runs, until=lambda runs: runs == [], within=10, what="the session's runs to go")
        assert len((await stub.ListSessionRuns(hooks_pb2.ListSessionRunsRequest(session_id="other-session"))).runs) == 1


async def _publish_session_deleted(nc: NatsClient, session_id: str) -> None:
    js = nc.jetstream()
    # The producer (agent-runner) owns this stream; the test stands in for it.
    await bus.ensure_streams(js, ("agent_runner",))
    payload = events_pb2.SessionDeleted(session_id=session_id, workspace_id="w").SerializeToString()
    await js.publish(subjects.SESSION_DELETED, payload, headers={"Nats-Msg-Id": f"deleted-{session_id}"})


async def test_the_maintenance_job_runs_in_the_service(
    hooks_dsn: str, nats_url: str, internal_credentials: tuple[dict[str, str], str]
) -> None:
    tokens, callers = internal_credentials
    await _insert_directly(hooks_dsn, "busy", 510, age=timedelta(0))
    await _insert_directly(hooks_dsn, "stale", 4, age=timedelta(days=40))
    async with running_service(service_env(hooks_dsn, nats_url, callers, None, None), tokens["gateway"]):
        await eventually(lambda: _row_count(hooks_dsn), until=lambda count: count == SESSION_CAP, within=10)
    assert await _row_count(hooks_dsn) == SESSION_CAP


async def test_an_audit_outage_changes_no_decision(
    hooks_dsn: str,
    nats_url: str,
    internal_credentials: tuple[dict[str, str], str],
    receiver: HttpsReceiver,
    caplog: pytest.LogCaptureFixture,
) -> None:
    tokens, callers = internal_credentials
    receiver.script("/deny", answer("deny", reason="no"))
    receiver.script("/ok", answer("pass", additionalContext="ctx"))
    hooks = document(
        PreToolUse=[handler("deny", receiver.url("/deny"), matcher=["shell"]), handler("ok", receiver.url("/ok"))],
        UserPromptSubmit=[handler("down", f"https://127.0.0.1:{closed_port()}/x")],
    )

    def requests() -> list[hooks_pb2.DispatchRequest]:
        return [
            hooks_pb2.DispatchRequest(event=hooks_pb2.PRE_TOOL_USE, session_id="s", target="shell"),
            hooks_pb2.DispatchRequest(event=hooks_pb2.PRE_TOOL_USE, session_id="s", target="webSearch"),
            hooks_pb2.DispatchRequest(
                event=hooks_pb2.USER_PROMPT_SUBMIT, session_id="s", detail_json=b'{"prompt":"p"}'
            ),
        ]

    def essence(response: hooks_pb2.DispatchResponse) -> tuple[object, ...]:
        return (
            response.outcome,
            response.failure_class,
            response.decided_by,
            response.additional_context,
            response.reason.split(":")[0],
            response.handlers_run,
        )

    async with running_service(service_env(hooks_dsn, nats_url, callers, receiver, hooks), tokens["agent-runner"]) as (
        running,
        channel,
    ):
        stub = hooks_pb2_grpc.HooksServiceStub(channel)
        before = [essence(await stub.Dispatch(r)) for r in requests()]
        await running.writer.flush()
        assert len((await stub.ListSessionRuns(hooks_pb2.ListSessionRunsRequest(session_id="s"))).runs) == 3

        # The audit table becomes unwritable (the database itself stays up: the kernel's
        # outbox relay shares it, and this test is about the audit path alone).
        await _alter_table(hooks_dsn, "popagent_hook_runs", "popagent_hook_runs_away")
        with caplog.at_level(logging.ERROR, logger="popagent_hooks.audit"):
            after = [essence(await stub.Dispatch(r)) for r in requests()]
            await running.writer.flush()
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.ListSessionRuns(hooks_pb2.ListSessionRunsRequest(session_id="s"))
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE

        # Once the store is back, later decisions are audited again.
        await _alter_table(hooks_dsn, "popagent_hook_runs_away", "popagent_hook_runs")
        await stub.Dispatch(requests()[1])
        assert len((await stub.ListSessionRuns(hooks_pb2.ListSessionRunsRequest(session_id="s"))).runs) == 4

    assert after == before
    assert [b[0] for b in before] == [hooks_pb2.DENY, hooks_pb2.PASS, hooks_pb2.DENY]
    assert before[2][1] == FailureClass.TRANSPORT.value
    assert any(r.getMessage() == "hook audit write failed" for r in caplog.records)


async def test_handlers_that_ran_before_the_caller_gave_up_are_audited(
    hooks_dsn: str, nats_url: str, internal_credentials: tuple[dict[str, str], str], receiver: HttpsReceiver
) -> None:
    tokens, callers = internal_credentials
    receiver.script("/fast", answer("pass", reason="fast one"))
    receiver.script("/slow", Reply(json_body={"schemaVersion": 1, "outcome": "pass"}, delay_s=3))
    hooks = document(
        PreToolUse=[handler("fast", receiver.url("/fast")), handler("slow", receiver.url("/slow"), timeoutMs=5000)]
    )
    async with running_service(service_env(hooks_dsn, nats_url, callers, receiver, hooks), tokens["agent-runner"]) as (
        running,
        channel,
    ):
        stub = hooks_pb2_grpc.HooksServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Dispatch(_dispatch("impatient", "t"), timeout=1.0)
        assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED

        async def flushed_runs() -> list[hooks_pb2.HookRun]:
            await running.writer.flush()
            return list((await stub.ListSessionRuns(hooks_pb2.ListSessionRunsRequest(session_id="impatient"))).runs)

        runs = await eventually(flushed_runs, within=5, what="the impatient run to be written")
    assert [(r.handler_id, r.reason) for r in runs] == [("fast", "fast one")]
