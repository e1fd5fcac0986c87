"""Store bounds: secrets per resource and origins per secret (real PostgreSQL)."""

from __future__ import annotations

import os
import shutil

import pytest

from popagent_core.db import open_pool
from popagent_core.errors import NotFound, ResourceExhausted
from popagent_core.migrate import migrate
from popagent_secrets.crypto import Keyring
from popagent_secrets.service import MIGRATIONS
from popagent_secrets.store import SecretStore, StoreLimits

R = "popagent-user"


async def test_a_resource_holds_a_bounded_number_of_secrets(make_database) -> None:
    dsn = await make_database({"secrets": MIGRATIONS})
    async with open_pool(dsn, "secrets") as pool:
        store = SecretStore(pool, Keyring(os.urandom(32)), StoreLimits(max_secrets_per_resource=3))
        for name in ("a", "b", "c"):
            await store.put(R, name, "v")
        with pytest.raises(ResourceExhausted, match="at most 3 secrets"):
            await store.put(R, "d", "v")
        await store.put(R, "a", "rotated")  # rotating an existing one is not a new secret
        await store.put("other-resource", "d", "v")  # the bound is per resource
        assert [s.name for s in await store.list_secrets(R)] == ["a", "b", "c"]


async def test_a_secret_is_bound_to_a_bounded_number_of_origins(make_database) -> None:
    dsn = await make_database({"secrets": MIGRATIONS})
    async with open_pool(dsn, "secrets") as pool:
        store = SecretStore(pool, Keyring(os.urandom(32)), StoreLimits(max_origins_per_secret=2))
        stored = await store.put(R, "a", "v")
        await store.bind(R, "a", "https://one.example")
        await store.bind(R, "a", "https://two.example")
        await store.bind(R, "a", "https://two.example:443")  # the same origin again: no new binding
        with pytest.raises(ResourceExhausted, match="at most 2 origins"):
            await store.bind(R, "a", "https://three.example")
        info = (await store.list_secrets(R))[0]
        assert info.origins == ("https://one.example", "https://two.example")
        with pytest.raises(NotFound):
            await store.bind(R, "missing", "https://one.example")
        await store.delete(stored.info.id)
        with pytest.raises(NotFound):
            await store.resolve(R, "a", "https://one.example")


async def test_deleting_a_secret_by_id_removes_its_origin_bindings(make_database) -> None:
    dsn = await make_database({"secrets": MIGRATIONS})
    async with open_pool(dsn, "secrets") as pool:
        store = SecretStore(pool, Keyring(os.urandom(32)))
        stored = await store.put(R, "a", "v")
        kept = await store.put(R, "b", "v")
        await store.bind(R, "a", "https://one.example")
        await store.bind(R, "b", "https://one.example")
        rotated = await store.put(R, "a", "rotated")
        assert (stored.created, rotated.created) == (True, False)
        assert rotated.info.id == stored.info.id
        assert rotated.info.origins == ("https://one.example",)

        await store.delete(stored.info.id)
        bindings = await pool.fetch("SELECT name, origin FROM popagent_secret_bindings ORDER BY name")
        assert [(r["name"], r["origin"]) for r in bindings] == [("b", "https://one.example")]
        # Provisioning the name again makes a new secret: no binding of the deleted one survives.
        again = await store.put(R, "a", "v")
        assert again.created
        assert again.info.id not in (stored.info.id, kept.info.id)
        assert again.info.origins == ()


async def test_secrets_provisioned_before_ids_existed_each_get_their_own(make_database, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Migration 0002 gives rows that exist already one distinct id each, and the store then uses them."""
    before_ids = tmp_path / "migrations"
    before_ids.mkdir()
    shutil.copy(MIGRATIONS / "0001_secrets.sql", before_ids)
    dsn = await make_database()
    await migrate(dsn, "secrets", before_ids)
    async with open_pool(dsn, "secrets") as pool:
        old = SecretStore(pool, Keyring(os.urandom(32)))
        for name in ("a", "b"):
            sealed = old.keyring.seal(b"v", R, name)
            await pool.execute(
                "INSERT INTO popagent_secrets (resource_id, name, key_id, nonce, ciphertext) VALUES ($1, $2, $3, $4, $5)",
                R,
                name,
                sealed.key_id,
                sealed.nonce,
                sealed.ciphertext,
            )
    await migrate(dsn, "secrets", MIGRATIONS)
    async with open_pool(dsn, "secrets") as pool:
        store = SecretStore(pool, old.keyring)
        ids = [info.id for info in await store.list_secrets(R)]
        assert len(set(ids)) == 2 and all(ids)
        await store.delete(ids[0])
        assert [info.name for info in await store.list_secrets(R)] == ["b"]
