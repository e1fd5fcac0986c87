"""`python -m popagent_secrets reencrypt`: move every row to the current key, service running.

Row by row, each in its own short transaction: lock one row not on the current key
(`FOR UPDATE SKIP LOCKED`, so a row a live write holds is skipped, not waited on),
decrypt it with the keyring (current + previous keys), seal it under the current key
and update it only if its key id and nonce are still the ones read (an optimistic
check on top of the lock). Skipped rows are retried in later passes. The running
service keeps serving throughout: every row is readable before and after its update.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
from cryptography.exceptions import InvalidTag

from popagent_core.db import open_pool
from popagent_core.migrate import migrate
from popagent_core.service import schema_for
from popagent_secrets.crypto import Keyring, Sealed
from popagent_secrets.errors import UnknownSecretKey
from popagent_secrets.store import QUERIES, SecretStore

logger = logging.getLogger(__name__)


@dataclass
class ReencryptReport:
    key_id: str
    reencrypted: int = 0
    # (resource_id, name) of rows that could not be opened: tampered, or sealed under a
    # key that is no longer configured. They stay as they are.
    failed: set[tuple[str, str]] = field(default_factory=set)
    remaining: int = 0

    def as_dict(self) -> dict[str, object]:
        return {
            "key_id": self.key_id,
            "reencrypted": self.reencrypted,
            "failed": sorted(f"{resource_id}/{name}" for resource_id, name in self.failed),
            "remaining": self.remaining,
        }


async def reencrypt_all(
    pool: asyncpg.Pool, keyring: Keyring, *, max_passes: int = 20, pause_s: float = 0.2
) -> ReencryptReport:
    store = SecretStore(pool, keyring)
    report = ReencryptReport(keyring.current.key_id)
    for _ in range(max_passes):
        cursor = ("", "")
        while True:
            row_key = await _rewrap_next(store, report, cursor)
            if row_key is None:
                break
            cursor = row_key
        async with pool.acquire() as conn:
            report.remaining = await conn.fetchval(QUERIES["count_stale_secrets"], report.key_id)
        if report.remaining <= len(report.failed):
            break
        # Rows left are held by live writes (skipped) or were rewritten meanwhile; retry.
        await asyncio.sleep(pause_s)
    return report


class _Rollback(Exception):
    """Ends a row's transaction without writing (and without counting an encryption)."""

    def __init__(self, row_key: tuple[str, str] | None) -> None:
        super().__init__()
        self.row_key = row_key


async def _rewrap_next(store: SecretStore, report: ReencryptReport, cursor: tuple[str, str]) -> tuple[str, str] | None:
    """Rewrap the next stale row after `cursor`; returns its key, or None when none is left."""
    try:
        async with store.pool.acquire() as conn, conn.transaction():
            # The key's counter before the row, as SecretStore.put does: the opposite order
            # deadlocks with a rotation of the same row running at the same moment.
            await store.reserve_encryption(conn)
            row = await conn.fetchrow(QUERIES["next_stale_secret"], report.key_id, *cursor)
            if row is None:
                raise _Rollback(None)
            resource_id, name = row["resource_id"], row["name"]
            if (resource_id, name) in report.failed:
                raise _Rollback((resource_id, name))
            old = Sealed(row["key_id"], bytes(row["nonce"]), bytes(row["ciphertext"]))
            try:
                plaintext = store.keyring.open(old, resource_id, name)
            except (InvalidTag, UnknownSecretKey) as exc:
                report.failed.add((resource_id, name))
                logger.error(
                    "secret could not be re-encrypted",
                    extra={
                        "resource_id": resource_id,
                        "secret": name,
                        "key_id": old.key_id,
                        "error": type(exc).__name__,
                    },
                )
                raise _Rollback((resource_id, name)) from None
            new = store.keyring.seal(plaintext, resource_id, name)
            updated = await conn.fetchval(
                QUERIES["rewrap_secret"],
                resource_id,
                name,
                new.key_id,
                new.nonce,
                new.ciphertext,
                old.key_id,
                old.nonce,
            )
    except _Rollback as rollback:
        return rollback.row_key
    if updated is not None:
        report.reencrypted += 1
        logger.info(
            "secret re-encrypted",
            extra={"resource_id": resource_id, "secret": name, "from_key_id": old.key_id, "to_key_id": new.key_id},
        )
    return resource_id, name


async def run_reencrypt(database_url: str, keyring: Keyring, migrations: Path) -> ReencryptReport:
    schema = schema_for("secrets")
    await migrate(database_url, schema, migrations)
    async with open_pool(database_url, schema, max_size=2, application_name="popagent-secrets-reencrypt") as pool:
        return await reencrypt_all(pool, keyring)
