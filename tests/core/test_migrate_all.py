"""`python -m popagent_core.migrate_all`: the Kubernetes migration Job (apply) and the services'
init containers (--wait), against real, initially empty PostgreSQL databases."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest

from popagent_core import topology
from popagent_core.migrate import MigrationChecksumMismatch, migrate, pending
from popagent_core.migrate_all import service_migrations
from popagent_core.service import schema_for
from popagent_core.span_store import STORE_MIGRATIONS, STORE_SCHEMA
from popagent_dev.pytest_plugin import DatabaseFactory


def run(env: dict[str, str], *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "popagent_core.migrate_all", *arguments],
        env={"PATH": os.environ.get("PATH", ""), **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def schemas(dsn: str) -> set[str]:
    conn = await asyncpg.connect(dsn)
    try:
        return {row["nspname"] for row in await conn.fetch("SELECT nspname FROM pg_namespace")}
    finally:
        await conn.close()


async def test_the_job_migrates_every_schema_and_the_wait_passes_only_then(make_database: DatabaseFactory) -> None:
    env = {"DATABASE_URL": await make_database(), "OBSERVABILITY_DATABASE_URL": await make_database()}
    with_migrations = [service for service in topology.SERVICES if service_migrations(service.module)]
    assert {service.name for service in with_migrations} == set(topology.SERVICE_NAMES) - {"gateway"}

    # Before the Job: an init container waits, and gives up at its deadline naming what is pending.
    waiting = run(env, "--wait", "--timeout-s", "0", "--interval-s", "0.1")
    assert waiting.returncode == 1
    assert "still pending" in waiting.stderr and "hooks/kernel/0001_kernel.sql" in waiting.stderr

    applied = run(env)
    assert applied.returncode == 0, applied.stderr
    assert {schema_for(service.name) for service in with_migrations} <= await schemas(env["DATABASE_URL"])
    assert STORE_SCHEMA in await schemas(env["OBSERVABILITY_DATABASE_URL"])
    for service in with_migrations:
        directory = service_migrations(service.module)
        assert directory is not None
        assert await pending(env["DATABASE_URL"], schema_for(service.name), directory) == []
    assert await pending(env["OBSERVABILITY_DATABASE_URL"], STORE_SCHEMA, STORE_MIGRATIONS, kernel=False) == []

    assert run(env, "--wait", "--timeout-s", "0").returncode == 0
    # A second run (the Job of the next rollout) applies nothing and succeeds.
    again = run(env)
    assert again.returncode == 0, again.stderr
    assert "agent_runner: 0 schema and 0 data migrations applied" in again.stdout


async def test_pending_names_new_files_and_refuses_an_edited_one(
    make_database: DatabaseFactory, tmp_path: Path
) -> None:
    dsn = await make_database()
    directory = tmp_path / "migrations"
    (directory / "data").mkdir(parents=True)
    (directory / "0001_first.sql").write_text("CREATE TABLE t (id int);\n")
    await migrate(dsn, "svc", directory)
    assert await pending(dsn, "svc", directory) == []
    (directory / "0002_second.sql").write_text("CREATE TABLE u (id int);\n")
    assert await pending(dsn, "svc", directory) == ["service/0002_second.sql"]
    (directory / "0001_first.sql").write_text("CREATE TABLE t (id bigint);\n")
    with pytest.raises(MigrationChecksumMismatch, match=r"0001_first\.sql was changed"):
        await pending(dsn, "svc", directory)


def test_a_missing_database_url_is_one_line() -> None:
    result = run({})
    assert result.returncode == 2
    assert result.stderr.strip() == "popagent-migrate: bad configuration: DATABASE_URL is required but not set"
