"""The secret store: validation, sealing and SQL for every operation, one transaction each.

Plaintext enters through `put` and leaves through `resolve` only; nothing here logs,
raises or publishes a value. Every committed change enqueues a metadata-only
`SecretChanged` fact in the same transaction (transactional outbox).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

import asyncpg
from asyncpg.pool import PoolConnectionProxy
from cryptography.exceptions import InvalidTag

from popagent.secrets.v1 import secrets_pb2
from popagent_core import subjects
from popagent_core.bus import enqueue_event
from popagent_core.db import load_queries, wrap_db_errors
from popagent_core.errors import NotFound, PermissionDenied, ResourceExhausted
from popagent_secrets.crypto import MAX_ENCRYPTIONS_PER_KEY, Keyring, Sealed
from popagent_secrets.errors import SecretIntegrityError
from popagent_secrets.models import (
    MAX_LISTED,
    MAX_ORIGINS_PER_SECRET,
    MAX_SECRETS_PER_RESOURCE,
    SecretInfo,
    StoredSecret,
    check_name,
    check_resource_id,
    check_secret_id,
    check_value,
)
from popagent_secrets.origins import normalize_origin

logger = logging.getLogger(__name__)

QUERIES = load_queries(Path(__file__).parent / "queries.sql")


@dataclass(frozen=True)
class StoreLimits:
    max_encryptions_per_key: int = MAX_ENCRYPTIONS_PER_KEY
    max_secrets_per_resource: int = MAX_SECRETS_PER_RESOURCE
    max_origins_per_secret: int = MAX_ORIGINS_PER_SECRET


class SecretStore:
    def __init__(self, pool: asyncpg.Pool, keyring: Keyring, limits: StoreLimits | None = None) -> None:
        self.pool = pool
        self.keyring = keyring
        self.limits = limits or StoreLimits()

    async def put(self, resource_id: str, name: str, value: str) -> StoredSecret:
        """Provision the secret, or rotate (replace) the value of the one with this resource and name;
        a rotation keeps its id and bindings."""
        check_resource_id(resource_id)
        check_name(name)
        plaintext = check_value(value)
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                sealed = await self.seal(conn, plaintext, resource_id, name)
                row = await conn.fetchrow(
                    QUERIES["upsert_secret"], resource_id, name, sealed.key_id, sealed.nonce, sealed.ciphertext
                )
                if row["inserted"]:
                    count = await conn.fetchval(QUERIES["count_secrets_of_resource"], resource_id)
                    if count > self.limits.max_secrets_per_resource:
                        raise ResourceExhausted(
                            f"a resource holds at most {self.limits.max_secrets_per_resource} secrets"
                        )
                origins = await conn.fetch(QUERIES["list_origins"], resource_id, name)
                await _changed(conn, resource_id, name, "stored")
        logger.info(
            "secret stored",
            extra={"resource_id": resource_id, "secret": name, "key_id": sealed.key_id, "new": row["inserted"]},
        )
        info = _info(row, resource_id, name, origins)
        return StoredSecret(info, created=row["inserted"])

    async def seal(self, conn: PoolConnectionProxy, plaintext: bytes, resource_id: str, name: str) -> Sealed:
        """Seal under the current key, counting the encryption in the caller's transaction."""
        await self.reserve_encryption(conn)
        return self.keyring.seal(plaintext, resource_id, name)

    async def reserve_encryption(self, conn: PoolConnectionProxy) -> None:
        """Count one encryption under the current key, refusing past the limit.

        Locks the key's counter row until the caller's transaction ends; every writer
        takes it before any secret row, so writers never deadlock each other.
        """
        key_id = self.keyring.current.key_id
        used: int = await conn.fetchval(QUERIES["count_encryption"], key_id)
        if used > self.limits.max_encryptions_per_key:
            raise ResourceExhausted(
                f"key {key_id} has sealed its maximum of {self.limits.max_encryptions_per_key} values; "
                "rotate POPAGENT_SECRET_KEY"
            )

    async def list_secrets(self, resource_id: str = "") -> list[SecretInfo]:
        """Names, bindings and timestamps; the query never reads a ciphertext."""
        if resource_id:
            check_resource_id(resource_id)
        with wrap_db_errors():
            rows = await self.pool.fetch(QUERIES["list_secrets"], resource_id, MAX_LISTED)
        return [
            SecretInfo(str(r["id"]), r["resource_id"], r["name"], tuple(r["origins"]), r["created_at"], r["updated_at"])
            for r in rows
        ]

    async def delete(self, secret_id: str, *, only_resources: frozenset[str] | None = None) -> None:
        """Delete the secret and, with it, every origin binding of it; with `only_resources`, only a
        secret of one of those resources (another is PermissionDenied)."""
        key = check_secret_id(secret_id)
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                allowed = sorted(only_resources) if only_resources is not None else None
                deleted = await conn.fetchrow(QUERIES["delete_secret"], key, allowed)
                if deleted is None:
                    if allowed is not None and await conn.fetchval(QUERIES["secret_resource"], key):
                        raise PermissionDenied(f"secret {secret_id} is not of resource {', '.join(allowed)}")
                    raise NotFound(f"secret {secret_id} not found")
                resource_id, name = deleted["resource_id"], deleted["name"]
                await _changed(conn, resource_id, name, "deleted")
        logger.info("secret deleted", extra={"resource_id": resource_id, "secret": name})

    async def bind(self, resource_id: str, name: str, origin: str) -> SecretInfo:
        """Allow filling the secret into pages and frames of exactly this https origin."""

        async def add(conn: PoolConnectionProxy, canonical: str) -> None:
            added = await conn.fetchval(QUERIES["insert_binding"], resource_id, name, canonical)
            if added is not None:
                count = await conn.fetchval(QUERIES["count_bindings"], resource_id, name)
                if count > self.limits.max_origins_per_secret:
                    raise ResourceExhausted(
                        f"a secret is bound to at most {self.limits.max_origins_per_secret} origins"
                    )
                await _changed(conn, resource_id, name, "bound", canonical)

        info, canonical = await self._change_origins(resource_id, name, origin, add)
        logger.info("secret origin bound", extra={"resource_id": resource_id, "secret": name, "origin": canonical})
        return info

    async def unbind(self, resource_id: str, name: str, origin: str) -> SecretInfo:
        async def remove(conn: PoolConnectionProxy, canonical: str) -> None:
            removed = await conn.fetchval(QUERIES["delete_binding"], resource_id, name, canonical)
            if removed is None:
                raise NotFound(f"origin {canonical} is not bound to secret {resource_id}/{name}")
            await _changed(conn, resource_id, name, "unbound", canonical)

        info, canonical = await self._change_origins(resource_id, name, origin, remove)
        logger.info("secret origin unbound", extra={"resource_id": resource_id, "secret": name, "origin": canonical})
        return info

    async def _change_origins(
        self, resource_id: str, name: str, origin: str, change: Callable[[PoolConnectionProxy, str], Awaitable[None]]
    ) -> tuple[SecretInfo, str]:
        """`change` of one secret's bindings for the canonical `origin`, in one transaction with the secret's
        row locked; the secret's metadata afterwards, and the canonical origin."""
        check_resource_id(resource_id)
        check_name(name)
        canonical = normalize_origin(origin)
        with wrap_db_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                # The row lock serializes binding changes of one secret, so a count of its bindings is exact.
                secret = await conn.fetchrow(QUERIES["lock_secret"], resource_id, name)
                if secret is None:
                    raise NotFound(f"secret {resource_id}/{name} not found")
                await change(conn, canonical)
                origins = await conn.fetch(QUERIES["list_origins"], resource_id, name)
        return _info(secret, resource_id, name, origins), canonical

    async def resolve(self, resource_id: str, name: str, origin: str) -> str:
        """The plaintext, for an origin exactly equal to a bound one. Callers gate who may ask."""
        check_resource_id(resource_id)
        check_name(name)
        canonical = normalize_origin(origin)
        with wrap_db_errors():
            row = await self.pool.fetchrow(QUERIES["resolve_secret"], resource_id, name, canonical)
        if row is None:
            raise NotFound(f"secret {resource_id}/{name} not found")
        if not row["bound"]:
            raise PermissionDenied(f"origin {canonical} is not bound to secret {resource_id}/{name}")
        return self._open(row, resource_id, name, canonical)

    async def resolve_token(self, resource_id: str, name: str) -> str:
        """The plaintext of a token that is sent, never filled into a page: no origin binding applies.
        Callers gate who may ask, and for which resource."""
        check_resource_id(resource_id)
        check_name(name)
        with wrap_db_errors():
            row = await self.pool.fetchrow(QUERIES["resolve_secret"], resource_id, name, "")
        if row is None:
            raise NotFound(f"secret {resource_id}/{name} not found")
        return self._open(row, resource_id, name, "")

    def _open(self, row: asyncpg.Record, resource_id: str, name: str, canonical: str) -> str:
        sealed = Sealed(row["key_id"], bytes(row["nonce"]), bytes(row["ciphertext"]))
        try:
            plaintext = self.keyring.open(sealed, resource_id, name)
        except InvalidTag:
            logger.error(
                "stored secret failed authentication",
                extra={"resource_id": resource_id, "secret": name, "key_id": sealed.key_id},
            )
            raise SecretIntegrityError(f"secret {resource_id}/{name} failed authentication") from None
        logger.info("secret resolved", extra={"resource_id": resource_id, "secret": name, "origin": canonical})
        return plaintext.decode()


def _info(secret: asyncpg.Record, resource_id: str, name: str, origins: list[asyncpg.Record]) -> SecretInfo:
    """A secret's metadata from its locked row and its binding rows (never the value)."""
    return SecretInfo(
        str(secret["id"]),
        resource_id,
        name,
        tuple(r["origin"] for r in origins),
        secret["created_at"],
        secret["updated_at"],
    )


async def _changed(conn: PoolConnectionProxy, resource_id: str, name: str, change: str, origin: str = "") -> None:
    event = secrets_pb2.SecretChanged(
        resource_id=resource_id, name=name, change=change, origin=origin, changed_at=datetime.now(UTC).isoformat()
    )
    # The pool's proxy forwards to the connection; enqueue_event is annotated with the latter.
    await enqueue_event(cast(asyncpg.Connection, conn), subjects.SECRET_CHANGED, event.SerializeToString())
