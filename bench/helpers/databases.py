"""A scratch PostgreSQL database for one benchmark run."""

from __future__ import annotations

import contextlib
import os
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg

from popagent_dev import embedded
from popagent_dev.embedded import with_database


@contextlib.contextmanager
def server_dsn(name: str) -> Iterator[str]:
    """DATABASE_URL when it is set (a bench against a tuned server), else an embedded PostgreSQL in a
    temporary folder for the run."""
    configured = os.environ.get("DATABASE_URL")
    if configured:
        yield configured
        return
    with (
        tempfile.TemporaryDirectory(prefix=f"popagent-bench-{name}-") as folder,
        embedded.postgres(Path(folder) / "pg") as dsn,
    ):
        yield dsn


async def emptied_database(admin_dsn: str, name: str) -> str:
    """The DSN of database `name` on the server of `admin_dsn`, dropped if a previous run left it and
    created empty."""
    admin = await asyncpg.connect(admin_dsn)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    return with_database(admin_dsn, name)


@contextlib.asynccontextmanager
async def scratch_database(name: str) -> AsyncIterator[str]:
    """The DSN of a database on `server_dsn` created for this run and dropped after it."""
    with server_dsn(name) as admin_dsn:
        database = f"popagent_bench_{name}_{uuid.uuid4().hex[:8]}"
        conn = await asyncpg.connect(admin_dsn)
        try:
            await conn.execute(f'CREATE DATABASE "{database}"')
            try:
                yield with_database(admin_dsn, database)
            finally:
                await conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        finally:
            await conn.close()
