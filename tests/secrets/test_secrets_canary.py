"""RELIABILITY row 23: a canary secret provisioned through the real service process never
leaves it except through ResolveSecret to browser-bridge: not in any other RPC response
or error, not in the process's log output, not in a NATS event, not at rest."""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
import grpc
import pytest
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from secrets_support import new_key, process_env, running_process, secrets_stub

from popagent.secrets.v1 import secrets_pb2
from popagent_core.migrate import migrate
from popagent_dev.embedded import NatsProcess, free_port
from popagent_secrets.service import MIGRATIONS
from support.canary import assert_no_canary, find_canary

R = "popagent-user"


async def test_canary_never_leaves_the_real_process(
    make_database,
    nats_server: NatsProcess,
    internal_credentials: tuple[dict[str, str], str],
    canary_secret: str,
    tmp_path: Path,
) -> None:
    tokens, callers_json = internal_credentials
    dsn = await make_database({"secrets": MIGRATIONS})
    address = f"127.0.0.1:{free_port()}"
    env = process_env(
        DATABASE_URL=dsn,
        NATS_URL=nats_server.url,
        POPAGENT_SECRETS_ADDR=address,
        POPAGENT_INTERNAL_CALLERS=callers_json,
        POPAGENT_SECRET_KEY=new_key(),
        POPAGENT_LOG_LEVEL="DEBUG",
    )
    # Everything published on the broker during the test, on any popagent subject.
    events: list[Msg] = []
    nc = NatsClient()
    await nc.connect(nats_server.url)

    five_secret_events = asyncio.Event()

    async def collect(msg: Msg) -> None:
        events.append(msg)
        if len([e for e in events if e.subject.startswith("popagent.secrets.")]) >= 5:
            five_secret_events.set()

    await nc.subscribe("popagent.>", cb=collect)
    stderr_path = tmp_path / "secrets.stderr"
    leaked_through_resolve: list[str] = []
    checked: list[str] = []

    def check(where: str, data: bytes | str) -> None:
        assert_no_canary(data, canary_secret, where)
        checked.append(where)

    async def refused(where: str, call, code: grpc.StatusCode) -> None:  # type: ignore[no-untyped-def]
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call
        assert caught.value.code() == code, where
        check(where, caught.value.details() or "")
        check(where + " metadata", repr(caught.value.trailing_metadata()))

    try:
        async with running_process(env, stderr_path):
            async with secrets_stub(address, tokens["gateway"]) as gw:
                check("PutSecret", (await gw.PutSecret(_put("github", canary_secret))).SerializeToString())
                check("BindOrigin", (await gw.BindOrigin(_bind("github", "https://github.com"))).SerializeToString())
                check("PutSecret rotate", (await gw.PutSecret(_put("github", canary_secret))).SerializeToString())
                other_secret = await gw.PutSecret(_put("other", canary_secret))
                check("PutSecret other", other_secret.SerializeToString())
                check("ListSecrets", (await gw.ListSecrets(secrets_pb2.ListSecretsRequest())).SerializeToString())
                # Invalid inputs that carry the canary: refusals must not echo it.
                await refused(
                    "oversize value", gw.PutSecret(_put("big", canary_secret * 200)), grpc.StatusCode.INVALID_ARGUMENT
                )
                await refused(
                    "canary as name", gw.PutSecret(_put(canary_secret, "v")), grpc.StatusCode.INVALID_ARGUMENT
                )
                await refused(
                    "canary in origin",
                    gw.BindOrigin(_bind("github", f"https://example.com/{canary_secret}")),
                    grpc.StatusCode.INVALID_ARGUMENT,
                )
            for caller in ("gateway", "agent-runner", "hooks", "tasks", "evolution", "secrets"):
                async with secrets_stub(address, tokens[caller]) as other:
                    await refused(
                        f"ResolveSecret as {caller}",
                        other.ResolveSecret(_resolve("github", "https://github.com")),
                        grpc.StatusCode.PERMISSION_DENIED,
                    )
            async with secrets_stub(address, tokens["browser-bridge"]) as bridge:
                await refused(
                    "ResolveSecret look-alike",
                    bridge.ResolveSecret(_resolve("github", "https://github.com.evil.com")),
                    grpc.StatusCode.PERMISSION_DENIED,
                )
                resolved = await bridge.ResolveSecret(_resolve("github", "https://github.com"))
                leaked_through_resolve.append(resolved.value)
                # A tampered row fails loudly (INTERNAL, logged with a traceback) and still leaks nothing.
                conn = await asyncpg.connect(dsn)
                try:
                    await conn.execute(
                        "UPDATE secrets.popagent_secrets SET nonce = set_byte(nonce, 0, get_byte(nonce, 0) # 1)"
                    )
                finally:
                    await conn.close()
                await refused(
                    "ResolveSecret tampered",
                    bridge.ResolveSecret(_resolve("github", "https://github.com")),
                    grpc.StatusCode.INTERNAL,
                )
            async with secrets_stub(address, tokens["gateway"]) as gw:
                await gw.DeleteSecret(secrets_pb2.DeleteSecretRequest(id=other_secret.secret.id))
            # stored, bound, stored, stored (other), deleted: wait for the outbox relay.
            await asyncio.wait_for(five_secret_events.wait(), timeout=15)
        # The process has exited (SIGTERM) and flushed its log output.
    finally:
        await nc.drain()

    assert leaked_through_resolve == [canary_secret]
    logs = stderr_path.read_text()
    assert '"msg":"secret stored"' in logs
    assert "stored secret failed authentication" in logs
    assert find_canary(logs, canary_secret) is None, "canary leaked into the service's log output"
    assert len(events) >= 5
    for event in events:
        check(f"NATS {event.subject}", event.subject.encode() + event.data + repr(event.headers).encode())

    # At rest: every table of the service's schema (secrets, bindings, usage, outbox).
    conn = await asyncpg.connect(dsn)
    try:
        await migrate(dsn, "secrets", MIGRATIONS)  # no-op; the schema is already current
        tables = await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'secrets'")
        for table in tables:
            rows = await conn.fetch(f'SELECT * FROM secrets."{table["tablename"]}"')
            check(f"table {table['tablename']}", "".join(repr(dict(row)) for row in rows))
    finally:
        await conn.close()
    assert len(checked) > 20


def _put(name: str, value: str) -> secrets_pb2.PutSecretRequest:
    return secrets_pb2.PutSecretRequest(resource_id=R, name=name, value=value)


def _bind(name: str, origin: str) -> secrets_pb2.BindOriginRequest:
    return secrets_pb2.BindOriginRequest(resource_id=R, name=name, origin=origin)


def _resolve(name: str, origin: str) -> secrets_pb2.ResolveSecretRequest:
    return secrets_pb2.ResolveSecretRequest(resource_id=R, name=name, origin=origin)
