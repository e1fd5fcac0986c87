"""Every named query of every service prepares against that service's migrated schema.

The query files are found on disk (any `*.sql` under a service package that is not a
migration), each belongs to the service package it lives in, and each is prepared with
`search_path` set to that service's schema exactly as the service's pool sets it. A typo
in a query, a renamed column or a dropped table fails here, not at run time; a new
queries file is covered without touching this test. The kernel's own queries (outbox,
migration ledgers, span store) are prepared too, each where it runs.
"""

from __future__ import annotations

import re
from pathlib import Path

import asyncpg
import pytest

from popagent_core.bus import OUTBOX_QUERIES_FILE
from popagent_core.db import load_queries
from popagent_core.migrate import MIGRATE_QUERIES_FILE, migrate
from popagent_core.service import schema_for
from popagent_core.span_store import STORE_MIGRATIONS, STORE_QUERIES_FILE, STORE_SCHEMA
from popagent_dev.pytest_plugin import DatabaseFactory

SERVICES_DIR = Path(__file__).resolve().parents[2] / "services"


def _service_packages() -> dict[str, Path]:
    """service name (its folder under services/) -> its package directory."""
    packages = {}
    for service_dir in sorted(SERVICES_DIR.iterdir()):
        for package in sorted((service_dir / "src").glob("popagent_*")):
            if package.is_dir():
                packages[service_dir.name] = package
    return packages


def _query_files(package: Path) -> list[Path]:
    return sorted(path for path in package.rglob("*.sql") if "migrations" not in path.relative_to(package).parts)


PACKAGES = _service_packages()
# Services whose queries read the observability store (OBSERVABILITY_DATABASE_URL), not a schema of their own.
OBSERVABILITY_READERS = {"gateway"}
MIGRATED = {
    service: package / "migrations" for service, package in PACKAGES.items() if (package / "migrations").is_dir()
}
ALL_QUERY_FILES = [(service, path) for service, package in PACKAGES.items() for path in _query_files(package)]
QUERY_FILES = [(service, path) for service, path in ALL_QUERY_FILES if service not in OBSERVABILITY_READERS]
STORE_QUERY_FILES = [(service, path) for service, path in ALL_QUERY_FILES if service in OBSERVABILITY_READERS] + [
    ("kernel", STORE_QUERIES_FILE)  # the span store writer's batches, heartbeat and retention
]
# The kernel's queries that run in a service's schema: the outbox and the migration ledgers both
# live in every one (the kernel migrations run first in each).
KERNEL_QUERY_FILES = [OUTBOX_QUERIES_FILE, MIGRATE_QUERIES_FILE]
# `SELECT *`, `RETURNING *`, `t.*`: a projection that changes whenever the table does.
STAR_PROJECTION = re.compile(r"(?:\bSELECT|\bRETURNING|,|\b\w+\.)\s*\*", re.IGNORECASE)


def test_discovery_finds_every_service_and_its_queries() -> None:
    # Guards the discovery itself: a layout change that hid the files would make the
    # preparation test below vacuous.
    assert {"agent-runner", "tasks", "hooks", "secrets", "evolution"} <= {service for service, _ in QUERY_FILES}
    assert STORE_QUERY_FILES, "the gateway's observability queries are not found"
    for path in [*KERNEL_QUERY_FILES, STORE_QUERIES_FILE]:
        assert load_queries(path), f"{path} holds no named query"
    for service, path in QUERY_FILES:
        assert service in MIGRATED, f"{path} belongs to {service}, which has no migrations"
        assert load_queries(path), f"{path} holds no named query"


@pytest.mark.parametrize(
    ("service", "path"), QUERY_FILES, ids=[str(path.relative_to(SERVICES_DIR)) for _, path in QUERY_FILES]
)
async def test_every_named_query_prepares(make_database: DatabaseFactory, service: str, path: Path) -> None:
    dsn = await make_database(MIGRATED)
    failures = await _unprepared(dsn, f"{schema_for(service)},public", path)
    assert not failures, f"queries in {path.relative_to(SERVICES_DIR)} do not prepare:\n" + "\n".join(failures)


@pytest.mark.parametrize("path", KERNEL_QUERY_FILES, ids=lambda p: p.name)
async def test_every_kernel_query_prepares_in_every_service_schema(make_database: DatabaseFactory, path: Path) -> None:
    dsn = await make_database(MIGRATED)
    failures = [
        f"{service}: {failure}"
        for service in MIGRATED
        for failure in await _unprepared(dsn, f"{schema_for(service)},public", path)
    ]
    assert not failures, f"queries in {path.name} do not prepare:\n" + "\n".join(failures)


async def _unprepared(dsn: str, search_path: str, path: Path) -> list[str]:
    """`name: error` of each query in `path` that does not prepare with `search_path`."""
    conn = await asyncpg.connect(dsn, server_settings={"search_path": search_path})
    failures = []
    try:
        for name, sql in load_queries(path).items():
            try:
                await conn.prepare(written_in(sql))
            except asyncpg.PostgresError as exc:
                failures.append(f"{name}: {type(exc).__name__}: {exc}")
    finally:
        await conn.close()
    return failures


# The integers code writes into a query before it runs (a type modifier cannot be a parameter):
# `{dims}`, an embedding's dimension (docs/queries.sql, for the partial HNSW index to apply).
WRITTEN_IN = {"{dims}": "256"}


def written_in(sql: str) -> str:
    for placeholder, value in WRITTEN_IN.items():
        sql = sql.replace(placeholder, value)
    return sql


@pytest.mark.parametrize("path", [path for _, path in STORE_QUERY_FILES], ids=lambda p: f"{p.parent.name}/{p.name}")
async def test_every_observability_query_prepares_against_the_store(make_database: DatabaseFactory, path: Path) -> None:
    dsn = await make_database()
    await migrate(dsn, STORE_SCHEMA, STORE_MIGRATIONS, kernel=False)
    failures = await _unprepared(dsn, STORE_SCHEMA, path)
    assert not failures, f"queries in {path} do not prepare:\n" + "\n".join(failures)


@pytest.mark.parametrize(
    ("service", "path"), ALL_QUERY_FILES, ids=[str(path.relative_to(SERVICES_DIR)) for _, path in ALL_QUERY_FILES]
)
def test_every_named_query_names_its_columns(service: str, path: Path) -> None:
    starred = [name for name, sql in load_queries(path).items() if STAR_PROJECTION.search(_without_comments(sql))]
    assert not starred, f"{path.relative_to(SERVICES_DIR)}: queries with a * projection: {starred}"


# The span store's batch inserts select `*` from `unnest` of their parameters: that projection
# is the query's own parameter list, not a table's columns, so it is not checked here.
@pytest.mark.parametrize("path", KERNEL_QUERY_FILES, ids=lambda p: p.name)
def test_every_kernel_query_names_its_columns(path: Path) -> None:
    starred = [name for name, sql in load_queries(path).items() if STAR_PROJECTION.search(_without_comments(sql))]
    assert not starred, f"{path.name}: queries with a * projection: {starred}"


def _without_comments(sql: str) -> str:
    return "\n".join(line.split("--", 1)[0] for line in sql.splitlines())
