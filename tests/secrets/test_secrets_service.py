"""SecretsService over real gRPC (in-process server on a socket), real PostgreSQL and NATS."""

from __future__ import annotations

import asyncio

import asyncpg
import grpc
import pytest
from nats.aio.client import Client as NatsClient
from secrets_support import put, resolve

from popagent.secrets.v1 import secrets_pb2, secrets_pb2_grpc
from popagent_core import subjects
from popagent_core.grpc_client import open_channel
from popagent_core.topology import SERVICE_NAMES
from support.canary import assert_no_canary

R = "popagent-user"


async def test_provision_bind_list_resolve_rotate_unbind_delete(
    secrets_service, canary_secret, caplog: pytest.LogCaptureFixture
) -> None:
    async with secrets_service.stub("gateway") as gw:
        stored = await gw.PutSecret(secrets_pb2.PutSecretRequest(resource_id=R, name="github", value=canary_secret))
        assert stored.created
        info = stored.secret
        assert (info.resource_id, info.name, list(info.origins)) == (R, "github", [])
        assert info.id
        assert info.created_at == info.updated_at
        secret_id = info.id
        info = await gw.BindOrigin(
            secrets_pb2.BindOriginRequest(resource_id=R, name="github", origin="https://GitHub.com/")
        )
        assert list(info.origins) == ["https://github.com"]
        # Binding again is idempotent.
        info = await gw.BindOrigin(
            secrets_pb2.BindOriginRequest(resource_id=R, name="github", origin="https://github.com")
        )
        assert list(info.origins) == ["https://github.com"]

    assert await resolve(secrets_service, R, "github", "https://github.com") == canary_secret

    async with secrets_service.stub("gateway") as gw:
        rotation = await gw.PutSecret(secrets_pb2.PutSecretRequest(resource_id=R, name="github", value="second value"))
        # The same resource and name rotate the existing secret: same id, not a second secret.
        assert not rotation.created
        rotated = rotation.secret
        assert rotated.id == secret_id
        assert rotated.created_at == info.created_at
        assert rotated.updated_at > info.updated_at
        assert list(rotated.origins) == ["https://github.com"]  # rotation keeps bindings
    assert await resolve(secrets_service, R, "github", "https://github.com") == "second value"

    async with secrets_service.stub("gateway") as gw:
        info = await gw.UnbindOrigin(
            secrets_pb2.UnbindOriginRequest(resource_id=R, name="github", origin="https://github.com:443")
        )
        assert list(info.origins) == []
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await resolve(secrets_service, R, "github", "https://github.com")
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED

    async with secrets_service.stub("gateway") as gw:
        assert [s.id for s in (await gw.ListSecrets(secrets_pb2.ListSecretsRequest())).secrets] == [secret_id]
        await gw.DeleteSecret(secrets_pb2.DeleteSecretRequest(id=secret_id))
        assert list((await gw.ListSecrets(secrets_pb2.ListSecretsRequest())).secrets) == []
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await gw.DeleteSecret(secrets_pb2.DeleteSecretRequest(id=secret_id))
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await gw.DeleteSecret(secrets_pb2.DeleteSecretRequest(id="github"))
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    messages = [record.getMessage() for record in caplog.records]
    assert "secret stored" in messages
    assert "secret resolved" in messages
    assert_no_canary(caplog.text, canary_secret, "log records")
    assert_no_canary(repr([record.__dict__ for record in caplog.records]), canary_secret, "log record fields")


async def test_list_carries_metadata_only(secrets_service, canary_secret) -> None:
    async with secrets_service.stub("gateway") as gw:
        await put(gw, R, "alpha", canary_secret)
        await put(gw, "agent-7", "beta", canary_secret)
        await gw.BindOrigin(secrets_pb2.BindOriginRequest(resource_id=R, name="alpha", origin="https://a.example"))
        everything = await gw.ListSecrets(secrets_pb2.ListSecretsRequest())
        scoped = await gw.ListSecrets(secrets_pb2.ListSecretsRequest(resource_id=R))
    assert [(s.resource_id, s.name, list(s.origins)) for s in everything.secrets] == [
        ("agent-7", "beta", []),
        (R, "alpha", ["https://a.example"]),
    ]
    assert [s.name for s in scoped.secrets] == ["alpha"]
    conn = await asyncpg.connect(secrets_service.dsn)
    try:
        stored = await conn.fetch("SELECT nonce, ciphertext FROM secrets.popagent_secrets")
    finally:
        await conn.close()
    wire = everything.SerializeToString() + scoped.SerializeToString()
    assert_no_canary(wire, canary_secret, "ListSecrets")
    for row in stored:
        assert_no_canary(bytes(row["ciphertext"]), canary_secret, "ciphertext at rest")
        assert bytes(row["ciphertext"]) not in wire
        assert bytes(row["ciphertext"]).hex().encode() not in wire
        assert bytes(row["nonce"]) not in wire


@pytest.mark.parametrize("caller", [c for c in SERVICE_NAMES if c != "browser-bridge"])
async def test_only_browser_bridge_resolves(secrets_service, caller: str) -> None:
    async with secrets_service.stub("gateway") as gw:
        await put(gw, R, "github", "hunter2-value")
        await gw.BindOrigin(secrets_pb2.BindOriginRequest(resource_id=R, name="github", origin="https://github.com"))
    async with secrets_service.stub(caller) as stub:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.ResolveSecret(
                secrets_pb2.ResolveSecretRequest(resource_id=R, name="github", origin="https://github.com")
            )
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "hunter2-value" not in (caught.value.details() or "")
    assert await resolve(secrets_service, R, "github", "https://github.com") == "hunter2-value"


@pytest.mark.parametrize("token", ["", "browser-bridge.forged-token", "nonsense"])
async def test_unauthenticated_resolve_is_refused(secrets_service, token: str) -> None:
    async with secrets_service.stub("gateway") as gw:
        await put(gw, R, "github", "hunter2-value")
        await gw.BindOrigin(secrets_pb2.BindOriginRequest(resource_id=R, name="github", origin="https://github.com"))
    async with open_channel(secrets_service.address, token) as channel:
        stub = secrets_pb2_grpc.SecretsServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.ResolveSecret(
                secrets_pb2.ResolveSecretRequest(resource_id=R, name="github", origin="https://github.com")
            )
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED


@pytest.mark.parametrize("caller", ["agent-runner", "hooks", "tasks", "evolution", "browser-bridge"])
async def test_only_the_gateway_manages_secrets(secrets_service, caller: str) -> None:
    async with secrets_service.stub("gateway") as gw:
        info = await put(gw, R, "github", "v")
    async with secrets_service.stub(caller) as stub:
        calls = [
            stub.PutSecret(secrets_pb2.PutSecretRequest(resource_id=R, name="github", value="overwritten")),
            stub.DeleteSecret(secrets_pb2.DeleteSecretRequest(id=info.id)),
            stub.BindOrigin(secrets_pb2.BindOriginRequest(resource_id=R, name="github", origin="https://evil.com")),
            stub.UnbindOrigin(secrets_pb2.UnbindOriginRequest(resource_id=R, name="github", origin="https://x.com")),
        ]
        for call in calls:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await call
            assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    async with secrets_service.stub("gateway") as gw:
        listed = await gw.ListSecrets(secrets_pb2.ListSecretsRequest())
    assert [(s.name, list(s.origins)) for s in listed.secrets] == [("github", [])]


async def test_agent_runner_keeps_only_the_mcp_server_tokens(secrets_service) -> None:
    """agent-runner stores, resolves and deletes secrets of `mcp-servers` (its MCP servers' bearer
    tokens), and no other; no other caller resolves those tokens."""
    async with secrets_service.stub("gateway") as gw:
        other = await put(gw, R, "github", "v")
    async with secrets_service.stub("agent-runner") as runner:
        stored = await runner.PutSecret(
            secrets_pb2.PutSecretRequest(resource_id="mcp-servers", name="mcp-1", value="bearer-value")
        )
        resolved = await runner.ResolveToken(secrets_pb2.ResolveTokenRequest(resource_id="mcp-servers", name="mcp-1"))
        assert resolved.value == "bearer-value"
        refused = [
            runner.ResolveToken(secrets_pb2.ResolveTokenRequest(resource_id=R, name="github")),
            runner.DeleteSecret(secrets_pb2.DeleteSecretRequest(id=other.id)),
            runner.PutSecret(secrets_pb2.PutSecretRequest(resource_id=R, name="github", value="x")),
        ]
        for call in refused:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await call
            assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    for caller in ("gateway", "browser-bridge", "hooks"):
        async with secrets_service.stub(caller) as stub:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.ResolveToken(secrets_pb2.ResolveTokenRequest(resource_id="mcp-servers", name="mcp-1"))
            assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    async with secrets_service.stub("agent-runner") as runner:
        await runner.DeleteSecret(secrets_pb2.DeleteSecretRequest(id=stored.secret.id))
    async with secrets_service.stub("gateway") as gw:
        listed = await gw.ListSecrets(secrets_pb2.ListSecretsRequest())
    assert [s.name for s in listed.secrets] == ["github"]


LOOK_ALIKES = [
    "https://example.com.evil.com",
    "https://example.com@evil.com",
    "http://example.com",
    "https://ex\u0430mple.com",  # Cyrillic a (U+0430): homograph
    "https://example.com.",
    "https://example.com:8443",
    "https://example.com/login",
    "https://*.example.com",
    "https://sub.example.com",
    "https://evil.com#@example.com",
    "https://example.com\\@evil.com",
    "",
]


async def test_look_alike_origins_never_resolve(secrets_service) -> None:
    async with secrets_service.stub("gateway") as gw:
        await put(gw, R, "bank", "s3cret-bank-password")
        await gw.BindOrigin(secrets_pb2.BindOriginRequest(resource_id=R, name="bank", origin="https://example.com"))
    refused = 0
    for origin in LOOK_ALIKES:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await resolve(secrets_service, R, "bank", origin)
        assert caught.value.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.PERMISSION_DENIED), origin
        assert "s3cret" not in (caught.value.details() or "")
        refused += 1
    assert refused == len(LOOK_ALIKES)
    assert await resolve(secrets_service, R, "bank", "https://example.com") == "s3cret-bank-password"
    assert await resolve(secrets_service, R, "bank", "https://example.com:443") == "s3cret-bank-password"


@pytest.mark.parametrize(
    "origin",
    [
        "http://example.com",
        "https://*.example.com",
        "https://example.com/login",
        "https://u@example.com",
        "https://a.com.",
    ],
)
async def test_bind_refuses_non_origins(secrets_service, origin: str) -> None:
    async with secrets_service.stub("gateway") as gw:
        await put(gw, R, "bank", "v")
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await gw.BindOrigin(secrets_pb2.BindOriginRequest(resource_id=R, name="bank", origin=origin))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details()


async def test_bounded_inputs(secrets_service) -> None:
    async with secrets_service.stub("gateway") as gw:
        await put(gw, R, "max", "x" * 8192)
        cases = [
            secrets_pb2.PutSecretRequest(resource_id=R, name="big", value="x" * 8193),
            secrets_pb2.PutSecretRequest(resource_id=R, name="multibyte", value="é" * 4097),
            secrets_pb2.PutSecretRequest(resource_id=R, name="empty", value=""),
            secrets_pb2.PutSecretRequest(resource_id=R, name="", value="v"),
            secrets_pb2.PutSecretRequest(resource_id=R, name="a" * 129, value="v"),
            secrets_pb2.PutSecretRequest(resource_id=R, name="has space", value="v"),
            secrets_pb2.PutSecretRequest(resource_id=R, name="new\nline", value="v"),
            secrets_pb2.PutSecretRequest(resource_id=R, name="../etc", value="v"),
            secrets_pb2.PutSecretRequest(resource_id="", name="n", value="v"),
            secrets_pb2.PutSecretRequest(resource_id="r/../x", name="n", value="v"),
        ]
        for request in cases:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await gw.PutSecret(request)
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, request.name
            assert "xxxx" not in (caught.value.details() or "")
        listed = await gw.ListSecrets(secrets_pb2.ListSecretsRequest())
    assert [s.name for s in listed.secrets] == ["max"]


async def _tamper(dsn: str, sql: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def test_swapped_rows_in_the_database_fail_authentication(secrets_service) -> None:
    async with secrets_service.stub("gateway") as gw:
        await put(gw, R, "alpha", "alpha-plaintext")
        await put(gw, R, "beta", "beta-plaintext")
        for name in ("alpha", "beta"):
            await gw.BindOrigin(secrets_pb2.BindOriginRequest(resource_id=R, name=name, origin="https://a.example"))
    await _tamper(
        secrets_service.dsn,
        """
        UPDATE secrets.popagent_secrets AS t SET key_id = s.key_id, nonce = s.nonce, ciphertext = s.ciphertext
        FROM secrets.popagent_secrets AS s
        WHERE t.resource_id = s.resource_id AND t.name <> s.name
        """,
    )
    for name in ("alpha", "beta"):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await resolve(secrets_service, R, name, "https://a.example")
        assert caught.value.code() == grpc.StatusCode.INTERNAL
        assert "plaintext" not in (caught.value.details() or "")


async def test_bit_flipped_row_fails_authentication(secrets_service) -> None:
    async with secrets_service.stub("gateway") as gw:
        await put(gw, R, "alpha", "alpha-plaintext")
        await gw.BindOrigin(secrets_pb2.BindOriginRequest(resource_id=R, name="alpha", origin="https://a.example"))
    await _tamper(
        secrets_service.dsn,
        "UPDATE secrets.popagent_secrets SET ciphertext = set_byte(ciphertext, 0, get_byte(ciphertext, 0) # 1)",
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await resolve(secrets_service, R, "alpha", "https://a.example")
    assert caught.value.code() == grpc.StatusCode.INTERNAL


async def test_encryptions_per_key_are_capped(secrets_service) -> None:
    key_id = secrets_service.settings.keyring().current.key_id
    async with secrets_service.stub("gateway") as gw:
        await put(gw, R, "first", "v")
        await _tamper(
            secrets_service.dsn,
            f"UPDATE secrets.popagent_secret_key_usage SET encryptions = 4294967296 WHERE key_id = '{key_id}'",
        )
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await put(gw, R, "second", "v")
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "rotate POPAGENT_SECRET_KEY" in (caught.value.details() or "")
        listed = await gw.ListSecrets(secrets_pb2.ListSecretsRequest())
    assert [s.name for s in listed.secrets] == ["first"]


async def test_changes_are_published_as_metadata_only_events(secrets_service, nats_url, canary_secret) -> None:
    nc = NatsClient()
    await nc.connect(nats_url)
    received: list[secrets_pb2.SecretChanged] = []
    raw: list[bytes] = []
    all_received = asyncio.Event()
    # Another test's service may publish on the same broker: keep this test's resource only.
    resource = f"res-{id(received)}"

    async def collect(msg) -> None:  # type: ignore[no-untyped-def]
        event = secrets_pb2.SecretChanged.FromString(msg.data)
        if event.resource_id == resource:
            received.append(event)
            raw.append(msg.data)
            if len(received) == 5:
                all_received.set()

    await nc.subscribe(subjects.SECRET_CHANGED, cb=collect)
    try:
        async with secrets_service.stub("gateway") as gw:
            await put(gw, resource, "github", canary_secret)
            await gw.BindOrigin(
                secrets_pb2.BindOriginRequest(resource_id=resource, name="github", origin="https://github.com")
            )
            info = await put(gw, resource, "github", canary_secret + "2")
            await gw.UnbindOrigin(
                secrets_pb2.UnbindOriginRequest(resource_id=resource, name="github", origin="https://github.com")
            )
            await gw.DeleteSecret(secrets_pb2.DeleteSecretRequest(id=info.id))
        await asyncio.wait_for(all_received.wait(), timeout=10)
    finally:
        await nc.drain()
    assert [(e.change, e.origin) for e in received] == [
        ("stored", ""),
        ("bound", "https://github.com"),
        ("stored", ""),
        ("unbound", "https://github.com"),
        ("deleted", ""),
    ]
    for data in raw:
        assert_no_canary(data, canary_secret, "NATS event")
