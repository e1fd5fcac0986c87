"""Per-service migration runner: plain SQL files, a ledger, an advisory lock, checksums.

Layout, in each service package:
  migrations/NNNN_<what>.sql       schema migrations, ledger `popagent_schema_migrations`
  migrations/data/NNNN_<what>.sql  versioned data migrations (singleton seeds and the like),
                                   ledger `popagent_data_migrations`
Every service schema also gets the kernel's own migrations first (ledgers, outbox).

Each pending file runs in its own transaction together with its ledger row, so a
failure leaves nothing half-applied. The whole run holds a PostgreSQL advisory lock
keyed on the schema, so two replicas starting at once apply each file exactly once.
An applied file whose checksum changed stops the service: history is never rewritten.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from popagent_core.db import check_schema_name, load_queries
from popagent_core.errors import ConfigurationError

logger = logging.getLogger(__name__)

_FILE = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
KERNEL_MIGRATIONS = Path(__file__).parent / "migrations"
MIGRATE_QUERIES_FILE = Path(__file__).parent / "migrate_queries.sql"
MIGRATE_QUERIES = load_queries(MIGRATE_QUERIES_FILE)


@dataclass(frozen=True)
class Ledger:
    """The named queries of one ledger table (the schema ledger or the data ledger)."""

    applied: str
    record: str


SCHEMA_LEDGER = Ledger(MIGRATE_QUERIES["applied_schema_migrations"], MIGRATE_QUERIES["record_schema_migration"])
DATA_LEDGER = Ledger(MIGRATE_QUERIES["applied_data_migrations"], MIGRATE_QUERIES["record_data_migration"])


class MigrationChecksumMismatch(ConfigurationError):
    """An applied migration file was changed after it ran."""


@dataclass(frozen=True)
class MigrationFile:
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def read_migrations(directory: Path) -> list[MigrationFile]:
    if not directory.is_dir():
        return []
    files = []
    for path in sorted(directory.iterdir()):
        if path.suffix != ".sql":
            continue
        if not _FILE.match(path.name):
            raise ConfigurationError(f"migration file {path} must be named NNNN_lower_snake.sql")
        files.append(MigrationFile(path.name, path.read_text()))
    return files


@dataclass(frozen=True)
class MigrationReport:
    applied: list[str]
    data_applied: list[str]


async def migrate(dsn: str, schema: str, migrations_dir: Path, *, kernel: bool = True) -> MigrationReport:
    """Bring `schema` up to date. Safe to run concurrently from several processes.

    `kernel=False` for a schema that is no service's (the observability store): no outbox there.
    """
    check_schema_name(schema)
    conn = await asyncpg.connect(dsn, server_settings={"application_name": f"popagent-migrate-{schema}"})
    try:
        await conn.execute(MIGRATE_QUERIES["lock"], schema)
        try:
            # The schema is an identifier, which cannot be a query parameter: these two are written
            # here, from a name check_schema_name has already confined to lower_snake.
            await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
            await conn.execute(f'SET search_path TO "{schema}", public')
            await conn.execute(MIGRATE_QUERIES["create_schema_ledger"])
            kernel_files = read_migrations(KERNEL_MIGRATIONS) if kernel else []
            applied = await _apply(conn, "kernel", kernel_files, SCHEMA_LEDGER)
            applied += await _apply(conn, "service", read_migrations(migrations_dir), SCHEMA_LEDGER)
            # The data ledger is a kernel table: a schema without the kernel has no data migrations.
            data_applied = (
                await _apply(conn, "service", read_migrations(migrations_dir / "data"), DATA_LEDGER) if kernel else []
            )
        finally:
            await conn.execute(MIGRATE_QUERIES["unlock"], schema)
    finally:
        await conn.close()
    if applied or data_applied:
        logger.info("migrated", extra={"schema": schema, "applied": applied, "data_applied": data_applied})
    return MigrationReport(applied, data_applied)


async def pending(dsn: str, schema: str, migrations_dir: Path, *, kernel: bool = True) -> list[str]:
    """The migration files of `schema` not applied yet (`scope/name`), changing nothing.

    Raises MigrationChecksumMismatch as `migrate` would: an applied file was edited since."""
    check_schema_name(schema)
    conn = await asyncpg.connect(dsn, server_settings={"application_name": f"popagent-migrate-check-{schema}"})
    try:
        ledgers = [
            (
                SCHEMA_LEDGER,
                "popagent_schema_migrations",
                "kernel",
                read_migrations(KERNEL_MIGRATIONS) if kernel else [],
            )
        ]
        ledgers.append((SCHEMA_LEDGER, "popagent_schema_migrations", "service", read_migrations(migrations_dir)))
        if kernel:
            ledgers.append(
                (DATA_LEDGER, "popagent_data_migrations", "service", read_migrations(migrations_dir / "data"))
            )
        waiting = []
        for ledger, table, scope, files in ledgers:
            done: dict[str, str] = {}
            if await conn.fetchval(MIGRATE_QUERIES["ledger_exists"], f'"{schema}".{table}'):
                # The schema was checked above; the ledger queries name their table unqualified.
                await conn.execute(f'SET search_path TO "{schema}", public')
                done = {row["name"]: row["checksum"] for row in await conn.fetch(ledger.applied, scope)}
            for migration in files:
                if migration.name not in done:
                    waiting.append(f"{scope}/{migration.name}")
                elif done[migration.name] != migration.checksum:
                    raise MigrationChecksumMismatch(
                        f"migration {schema}/{scope}/{migration.name} was changed after it was applied"
                    )
        return waiting
    finally:
        await conn.close()


async def _apply(conn: asyncpg.Connection, scope: str, files: list[MigrationFile], ledger: Ledger) -> list[str]:
    rows = await conn.fetch(ledger.applied, scope)
    done = {row["name"]: row["checksum"] for row in rows}
    applied = []
    for migration in files:
        if migration.name in done:
            if done[migration.name] != migration.checksum:
                raise MigrationChecksumMismatch(
                    f"migration {scope}/{migration.name} was changed after it was applied; "
                    "add a new migration instead of editing an applied one"
                )
            continue
        async with conn.transaction():
            await conn.execute(migration.sql)
            await conn.execute(ledger.record, scope, migration.name, migration.checksum)
        applied.append(migration.name)
    return applied
