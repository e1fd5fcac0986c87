"""docs/operations.md, Backup and restore, on real PostgreSQL: both databases dumped with `pg_dump -Fc`
(pgserver's binaries, as the document says) and restored with `pg_restore` into empty databases carry
their rows and their migration ledgers, so the services find nothing pending and the migration Job
applies nothing again."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import asyncpg
import pgserver

from popagent_core import topology
from popagent_core.migrate import pending
from popagent_core.migrate_all import service_migrations
from popagent_core.service import schema_for
from popagent_core.span_store import STORE_MIGRATIONS, STORE_SCHEMA
from popagent_dev.pytest_plugin import DatabaseFactory

PGBIN = Path(pgserver.__file__).parent / "pginstall" / "bin"


def run(program: str, *arguments: str) -> None:
    done = subprocess.run([str(PGBIN / program), *arguments], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, (program, done.stderr)


def migrate_all(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "popagent_core.migrate_all"],
        env={"PATH": os.environ.get("PATH", ""), **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def fetch_thread(dsn: str, thread_id: str) -> tuple[str, str] | None:
    conn = await asyncpg.connect(dsn)
    try:
        row = await conn.fetchrow("SELECT id, resource_id FROM agent_runner.popagent_threads WHERE id = $1", thread_id)
    finally:
        await conn.close()
    return None if row is None else (row["id"], row["resource_id"])


async def test_a_dump_restored_into_empty_databases_keeps_the_rows_and_the_migration_ledgers(
    make_database: DatabaseFactory, tmp_path: Path
) -> None:
    source = {"DATABASE_URL": await make_database(), "OBSERVABILITY_DATABASE_URL": await make_database()}
    applied = migrate_all(source)
    assert applied.returncode == 0, applied.stderr
    thread = f"backup-{uuid.uuid4().hex[:8]}"
    conn = await asyncpg.connect(source["DATABASE_URL"])
    try:
        await conn.execute(
            "INSERT INTO agent_runner.popagent_threads (id, resource_id) VALUES ($1, 'popagent-user')", thread
        )
    finally:
        await conn.close()

    restored = {"DATABASE_URL": await make_database(), "OBSERVABILITY_DATABASE_URL": await make_database()}
    for variable in source:
        dump = tmp_path / f"{variable}.dump"
        run("pg_dump", "-Fc", "-d", source[variable], "-f", str(dump))
        run("pg_restore", "-d", restored[variable], str(dump))

    assert await fetch_thread(restored["DATABASE_URL"], thread) == (thread, "popagent-user")
    for service in topology.SERVICES:
        directory = service_migrations(service.module)
        if directory is not None:
            assert await pending(restored["DATABASE_URL"], schema_for(service.name), directory) == [], service.name
    assert await pending(restored["OBSERVABILITY_DATABASE_URL"], STORE_SCHEMA, STORE_MIGRATIONS, kernel=False) == []
    # The migration Job on the restored databases: nothing to apply, nothing lost.
    again = migrate_all(restored)
    assert again.returncode == 0, again.stderr
    assert await fetch_thread(restored["DATABASE_URL"], thread) == (thread, "popagent-user")
