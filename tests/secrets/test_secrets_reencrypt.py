"""Key rotation: `python -m popagent_secrets reencrypt` (real process) moves every row to the
current key while the service keeps serving (RELIABILITY row 22)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import random
import sys

import asyncpg
import grpc
from secrets_support import outbox_drained, process_env, secrets_stub

from popagent.secrets.v1 import secrets_pb2
from popagent_core.credentials import generate_credentials
from popagent_core.db import open_pool
from popagent_core.settings import load_settings
from popagent_dev.embedded import free_port
from popagent_secrets.crypto import Keyring, Sealed, key_id_for
from popagent_secrets.reencrypt import reencrypt_all
from popagent_secrets.service import MIGRATIONS, build
from popagent_secrets.settings import Settings
from popagent_secrets.store import SecretStore
from support.canary import find_canary
from support.waiting import eventually

R = "popagent-user"
ROWS = 180
ORIGIN = "https://app.example"


async def run_reencrypt(dsn: str, key: bytes, previous: bytes) -> tuple[int, dict, str]:
    env = process_env(
        DATABASE_URL=dsn,
        POPAGENT_INTERNAL_CALLERS=generate_credentials()[1],
        POPAGENT_SECRET_KEY=base64.b64encode(key).decode(),
        POPAGENT_SECRET_PREVIOUS_KEYS=base64.b64encode(previous).decode(),
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "popagent_secrets",
        "reencrypt",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=45)
    assert process.returncode is not None
    lines = stdout.decode().splitlines()
    assert len(lines) == 1, stdout
    return process.returncode, json.loads(lines[0]), stderr.decode()


async def stored_rows(dsn: str) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetch(
            "SELECT resource_id, name, key_id, nonce, ciphertext, updated_at FROM secrets.popagent_secrets ORDER BY name"
        )
    finally:
        await conn.close()


async def test_reencrypt_moves_every_row_to_the_current_key_while_serving(
    make_database, nats_url: str, internal_credentials: tuple[dict[str, str], str], canary_secret: str
) -> None:
    tokens, callers_json = internal_credentials
    dsn = await make_database({"secrets": MIGRATIONS})
    old, new = os.urandom(32), os.urandom(32)
    expected = {f"s{i:03d}": f"{canary_secret}-{i}" for i in range(ROWS)}
    async with open_pool(dsn, "secrets") as pool:
        store = SecretStore(pool, Keyring(old))
        for name, value in expected.items():
            await store.put(R, name, value)
        await store.bind(R, "s000", ORIGIN)
    before = {row["name"]: row for row in await stored_rows(dsn)}
    assert {row["key_id"] for row in before.values()} == {key_id_for(old)}

    # The service restarted with the new key and the old one as previous, as in a deploy.
    settings = load_settings(
        Settings,
        "secrets",
        DATABASE_URL=dsn,
        NATS_URL=nats_url,
        POPAGENT_SECRETS_ADDR=f"127.0.0.1:{free_port()}",
        POPAGENT_INTERNAL_CALLERS=callers_json,
        POPAGENT_SECRET_KEY=base64.b64encode(new).decode(),
        POPAGENT_SECRET_PREVIOUS_KEYS=base64.b64encode(old).decode(),
    )
    served: list[str] = []
    rotated: dict[str, str] = {}
    failures: list[BaseException] = []

    async with (
        build(settings),
        secrets_stub(settings.grpc_address, tokens["browser-bridge"]) as bridge,
        secrets_stub(settings.grpc_address, tokens["gateway"]) as gateway,
    ):
        stop = asyncio.Event()

        async def keep_serving() -> None:
            rng = random.Random(7)
            while not stop.is_set():
                try:
                    value = (
                        await bridge.ResolveSecret(
                            secrets_pb2.ResolveSecretRequest(resource_id=R, name="s000", origin=ORIGIN)
                        )
                    ).value
                    served.append(value)
                    name = f"s{rng.randrange(1, ROWS):03d}"
                    await gateway.PutSecret(
                        secrets_pb2.PutSecretRequest(resource_id=R, name=name, value=f"rotated-{len(served)}")
                    )
                    rotated[name] = f"rotated-{len(served)}"
                    listed = await gateway.ListSecrets(secrets_pb2.ListSecretsRequest(resource_id=R))
                    assert len(listed.secrets) == ROWS
                except (grpc.aio.AioRpcError, AssertionError) as exc:
                    failures.append(exc)
                    return

        traffic = asyncio.create_task(keep_serving())
        try:
            code, report, stderr = await run_reencrypt(dsn, new, old)
        finally:
            stop.set()
            await traffic
        await outbox_drained(dsn)

    assert failures == []
    assert len(served) > 0
    assert set(served) == {expected["s000"]}
    assert code == 0, stderr
    assert report["key_id"] == key_id_for(new)
    assert report["failed"] == []
    assert report["remaining"] == 0
    # Rows a live rotation already moved were not rewrapped again.
    assert ROWS - len(rotated) <= report["reencrypted"] <= ROWS
    assert find_canary(stderr, canary_secret) is None
    assert '"msg":"secret re-encrypted"' in stderr

    after = await stored_rows(dsn)
    assert len(after) == ROWS
    assert {row["key_id"] for row in after} == {key_id_for(new)}
    only_new = Keyring(new)  # the old key is no longer needed for any row
    for row in after:
        sealed = Sealed(row["key_id"], bytes(row["nonce"]), bytes(row["ciphertext"]))
        value = only_new.open(sealed, row["resource_id"], row["name"]).decode()
        assert value == rotated.get(row["name"], expected[row["name"]])
        if row["name"] not in rotated:
            # Re-encryption is not a value change.
            assert row["updated_at"] == before[row["name"]]["updated_at"]
            assert bytes(row["nonce"]) != bytes(before[row["name"]]["nonce"])

    # Idempotent: a second run finds nothing to do.
    code, report, _ = await run_reencrypt(dsn, new, old)
    assert (code, report["reencrypted"], report["remaining"]) == (0, 0, 0)


async def test_reencrypt_reports_rows_it_cannot_open_and_moves_the_rest(make_database) -> None:
    dsn = await make_database({"secrets": MIGRATIONS})
    old, new, lost = os.urandom(32), os.urandom(32), os.urandom(32)
    async with open_pool(dsn, "secrets") as pool:
        await SecretStore(pool, Keyring(old)).put(R, "good", "good-value")
        await SecretStore(pool, Keyring(lost)).put(R, "orphan", "orphan-value")
        await SecretStore(pool, Keyring(old)).put(R, "tampered", "tampered-value")
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            "UPDATE secrets.popagent_secrets SET ciphertext = set_byte(ciphertext, 0, get_byte(ciphertext, 0) # 1)"
            " WHERE name = 'tampered'"
        )
    finally:
        await conn.close()
    code, report, stderr = await run_reencrypt(dsn, new, old)
    assert code == 1
    assert report["failed"] == [f"{R}/orphan", f"{R}/tampered"]
    assert report["reencrypted"] == 1
    assert "orphan-value" not in stderr and "tampered-value" not in stderr
    keys = {row["name"]: row["key_id"] for row in await stored_rows(dsn)}
    assert keys == {"good": key_id_for(new), "orphan": key_id_for(lost), "tampered": key_id_for(old)}


async def test_reencrypt_takes_locks_in_the_same_order_as_writers(make_database) -> None:
    """A rotation holds the key's counter and then wants the row; re-encryption must wait
    for the counter before taking any row, or the two deadlock."""
    dsn = await make_database({"secrets": MIGRATIONS})
    old, new = os.urandom(32), os.urandom(32)
    async with open_pool(dsn, "secrets") as pool:
        await SecretStore(pool, Keyring(old)).put(R, "stale", "stale-value")
        await SecretStore(pool, Keyring(new)).put(R, "current", "current-value")  # creates the counter row
        writer = await asyncpg.connect(dsn)
        try:
            async with writer.transaction():
                # A PutSecret midway: it holds the current key's counter...
                await writer.execute(
                    "SELECT 1 FROM secrets.popagent_secret_key_usage WHERE key_id = $1 FOR UPDATE", key_id_for(new)
                )
                rewrap = asyncio.create_task(reencrypt_all(pool, Keyring(new, (old,))))
                for _ in range(500):  # until re-encryption waits on a lock (at most 10 s)
                    waiting = await writer.fetchval(
                        "SELECT count(*) FROM pg_stat_activity"
                        " WHERE datname = current_database() AND wait_event_type = 'Lock'"
                    )
                    if waiting:
                        break
                    await asyncio.sleep(0.02)
                else:
                    raise TimeoutError("re-encryption never waited for the writer's lock")
                # ...and now wants the row. Had re-encryption locked the row first, this deadlocks.
                await writer.execute("SELECT 1 FROM secrets.popagent_secrets WHERE name = 'stale' FOR UPDATE")
            report = await asyncio.wait_for(rewrap, timeout=10)
        finally:
            await writer.close()
    assert (report.reencrypted, report.remaining, report.failed) == (1, 0, set())


async def test_reencrypt_skips_a_row_a_live_write_holds_and_comes_back_for_it(make_database) -> None:
    dsn = await make_database({"secrets": MIGRATIONS})
    old, new = os.urandom(32), os.urandom(32)
    async with open_pool(dsn, "secrets") as pool:
        old_store = SecretStore(pool, Keyring(old))
        await old_store.put(R, "held", "held-value")
        await old_store.put(R, "free", "free-value")
        writer = await asyncpg.connect(dsn)
        try:
            async with writer.transaction():
                # A bind of "held" midway: it holds the row (not the key's counter).
                await writer.execute("SELECT 1 FROM secrets.popagent_secrets WHERE name = 'held' FOR UPDATE")
                rewrap = asyncio.create_task(reencrypt_all(pool, Keyring(new, (old,)), max_passes=1000, pause_s=0.05))
                await eventually(
                    lambda: writer.fetchval("SELECT key_id FROM secrets.popagent_secrets WHERE name = 'free'"),
                    until=lambda free_key: free_key == key_id_for(new),
                    within=10,
                    interval=0.02,
                    what="re-encryption to move the free row while the other was held",
                )
                # Not waited on: the held row is still on the old key and re-encryption is still running.
                assert not rewrap.done()
                held_key = await writer.fetchval("SELECT key_id FROM secrets.popagent_secrets WHERE name = 'held'")
                assert held_key == key_id_for(old)
            report = await asyncio.wait_for(rewrap, timeout=10)
        finally:
            await writer.close()
    assert (report.reencrypted, report.remaining, report.failed) == (2, 0, set())
    keys = {row["name"]: row["key_id"] for row in await stored_rows(dsn)}
    assert keys == {"held": key_id_for(new), "free": key_id_for(new)}
