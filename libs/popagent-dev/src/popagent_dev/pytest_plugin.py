"""pytest plugin: real PostgreSQL and NATS for every integration test.

- PostgreSQL: `POPAGENT_TEST_DATABASE_URL` when set, else an embedded pgserver shared by
  every xdist worker of the run. Each test gets its own database cloned
  (`CREATE DATABASE … TEMPLATE`) from a template migrated once per set of migrations,
  so tests run in parallel and never see each other's rows.
- NATS: `POPAGENT_TEST_NATS_URL` when set, else an embedded nats-server per worker.
- `POPAGENT_TEST_DOCKER=1`: PostgreSQL (pgvector) and NATS in containers through
  testcontainers instead, for machines with a Docker engine (each xdist worker starts
  its own pair).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import asyncpg
import pytest

from popagent_core.migrate import KERNEL_MIGRATIONS, migrate
from popagent_core.service import schema_for
from popagent_dev import embedded
from popagent_dev.embedded import with_database

REPO_ROOT = Path(__file__).resolve().parents[4]


def pytest_configure(config: pytest.Config) -> None:
    # Settings come from the test, never from the developer's shell.
    for key in list(os.environ):
        if key.startswith("POPAGENT_") and not key.startswith("POPAGENT_TEST_"):
            del os.environ[key]
    for key in ("DATABASE_URL", "OBSERVABILITY_DATABASE_URL", "NATS_URL", "NINEROUTER_URL", "NINEROUTER_API_KEY"):
        os.environ.pop(key, None)


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    """DSN of the test PostgreSQL server's maintenance database."""
    configured = os.environ.get("POPAGENT_TEST_DATABASE_URL")
    if configured:
        yield configured
        return
    if os.environ.get("POPAGENT_TEST_DOCKER") == "1":
        yield from _postgres_container()
        return
    data_dir = Path(tempfile.gettempdir()) / f"popagent-test-pg-{hashlib.sha1(str(REPO_ROOT).encode()).hexdigest()[:8]}"
    with embedded.postgres(data_dir) as dsn:
        yield dsn


def _postgres_container() -> Iterator[str]:
    from testcontainers.community.postgres import PostgresContainer

    with PostgresContainer("pgvector/pgvector:pg16", driver=None) as container:
        yield container.get_connection_url()


def _nats_container() -> Iterator[str]:
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.waiting_utils import wait_for_logs

    with DockerContainer("nats:2").with_command("-js").with_exposed_ports(4222) as container:
        wait_for_logs(container, "Server is ready")
        yield f"nats://{container.get_container_host_ip()}:{container.get_exposed_port(4222)}"


def _fingerprint(services: tuple[str, ...], dirs: tuple[Path, ...]) -> str:
    digest = hashlib.sha256()
    for directory in (KERNEL_MIGRATIONS, *dirs):
        for path in sorted(directory.rglob("*.sql")):
            digest.update(path.name.encode())
            digest.update(path.read_bytes())
    digest.update(",".join(services).encode())
    return digest.hexdigest()[:16]


async def _ensure_template(admin_dsn: str, services: tuple[str, ...], dirs: tuple[Path, ...]) -> str:
    template = f"popagent_tpl_{_fingerprint(services, dirs)}"
    conn = await asyncpg.connect(admin_dsn)
    try:
        # One creator per template across xdist workers.
        await conn.execute("SELECT pg_advisory_lock(hashtext('popagent.test-template'))")
        try:
            exists = await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", template)
            if not exists:
                building = f"{template}_building"
                await conn.execute(f'DROP DATABASE IF EXISTS "{building}"')
                await conn.execute(f'CREATE DATABASE "{building}"')
                dsn = with_database(admin_dsn, building)
                for service, directory in zip(services, dirs, strict=True):
                    await migrate(dsn, schema_for(service), directory)
                await conn.execute(f'ALTER DATABASE "{building}" RENAME TO "{template}"')
        finally:
            await conn.execute("SELECT pg_advisory_unlock(hashtext('popagent.test-template'))")
    finally:
        await conn.close()
    return template


DatabaseFactory = Callable[..., Awaitable[str]]


@pytest.fixture
async def make_database(pg_dsn: str) -> AsyncIterator[DatabaseFactory]:
    """`await make_database({"hooks": MIGRATIONS_DIR, ...})` -> DSN of a fresh migrated database.

    With no argument the database is empty (no schemas), for testing migrations themselves.
    """
    created: list[str] = []

    async def factory(migrations: dict[str, Path] | None = None) -> str:
        name = f"popagent_test_{uuid.uuid4().hex[:12]}"
        conn = await asyncpg.connect(pg_dsn)
        try:
            if migrations:
                services = tuple(sorted(migrations))
                template = await _ensure_template(pg_dsn, services, tuple(migrations[s] for s in services))
                await conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
            else:
                await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()
        created.append(name)
        return with_database(pg_dsn, name)

    yield factory
    conn = await asyncpg.connect(pg_dsn)
    try:
        for name in created:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


@pytest.fixture(scope="session")
def nats_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    configured = os.environ.get("POPAGENT_TEST_NATS_URL")
    if configured:
        yield configured
        return
    if os.environ.get("POPAGENT_TEST_DOCKER") == "1":
        yield from _nats_container()
        return
    with embedded.nats(tmp_path_factory.mktemp("nats")) as process:
        yield process.url


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[embedded.NatsProcess]:
    """A private nats-server for tests that stop and restart the broker."""
    process = embedded.start_nats(tmp_path / "nats")
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="session")
def internal_credentials() -> tuple[dict[str, str], str]:
    """(tokens by caller, POPAGENT_INTERNAL_CALLERS json) for tests that start services."""
    from popagent_core.credentials import generate_credentials

    return generate_credentials()
