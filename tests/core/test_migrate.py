"""The migration runner against a real, initially empty PostgreSQL database."""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
from pathlib import Path

import asyncpg
import pytest

from popagent_core.errors import ConfigurationError
from popagent_core.migrate import KERNEL_MIGRATIONS, MigrationChecksumMismatch, migrate

SCHEMA = "svc"


def write(directory: Path, name: str, sql: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(sql)
    return path


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_text().encode()).hexdigest()


async def fetch(dsn: str, query: str, *args: object) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn, server_settings={"search_path": SCHEMA})
    try:
        return await conn.fetch(query, *args)
    finally:
        await conn.close()


async def table_exists(dsn: str, table: str) -> bool:
    rows = await fetch(dsn, "SELECT to_regclass($1) IS NOT NULL AS found", f"{SCHEMA}.{table}")
    return rows[0]["found"]


@pytest.fixture
def migrations(tmp_path: Path) -> Path:
    directory = tmp_path / "migrations"
    directory.mkdir()
    return directory


async def test_applies_kernel_service_and_data_files_once_and_records_checksums(make_database, migrations):
    dsn = await make_database()
    first = write(migrations, "0001_things.sql", "CREATE TABLE things (id int PRIMARY KEY, label text NOT NULL);")
    second = write(migrations, "0002_more.sql", "ALTER TABLE things ADD COLUMN extra text;")
    seed = write(migrations / "data", "0001_seed_things.sql", "INSERT INTO things (id, label) VALUES (1, 'seed');")

    report = await migrate(dsn, SCHEMA, migrations)

    assert report.applied == ["0001_kernel.sql", "0002_outbox_trace_context.sql", "0001_things.sql", "0002_more.sql"]
    assert report.data_applied == ["0001_seed_things.sql"]
    kernel_file = KERNEL_MIGRATIONS / "0001_kernel.sql"
    ledger = await fetch(dsn, "SELECT scope, name, checksum FROM popagent_schema_migrations ORDER BY scope, name")
    assert [tuple(row) for row in ledger] == [
        ("kernel", "0001_kernel.sql", sha256(kernel_file)),
        ("kernel", "0002_outbox_trace_context.sql", sha256(KERNEL_MIGRATIONS / "0002_outbox_trace_context.sql")),
        ("service", "0001_things.sql", sha256(first)),
        ("service", "0002_more.sql", sha256(second)),
    ]
    data_ledger = await fetch(dsn, "SELECT scope, name, checksum FROM popagent_data_migrations")
    assert [tuple(row) for row in data_ledger] == [("service", "0001_seed_things.sql", sha256(seed))]

    again = await migrate(dsn, SCHEMA, migrations)

    assert again.applied == [] and again.data_applied == []
    # Re-running the seed would have failed on the primary key or added a row.
    assert [tuple(row) for row in await fetch(dsn, "SELECT id, label FROM things")] == [(1, "seed")]
    assert len(await fetch(dsn, "SELECT 1 FROM popagent_schema_migrations")) == 4


async def test_a_new_file_added_later_is_the_only_one_applied(make_database, migrations):
    dsn = await make_database()
    write(migrations, "0001_things.sql", "CREATE TABLE things (id int PRIMARY KEY);")
    await migrate(dsn, SCHEMA, migrations)
    write(migrations, "0002_more.sql", "CREATE TABLE more_things (id int PRIMARY KEY);")

    report = await migrate(dsn, SCHEMA, migrations)

    assert report.applied == ["0002_more.sql"]
    assert await table_exists(dsn, "more_things")


async def test_refuses_an_applied_file_whose_content_changed(make_database, migrations):
    dsn = await make_database()
    path = write(migrations, "0001_things.sql", "CREATE TABLE things (id int PRIMARY KEY);")
    await migrate(dsn, SCHEMA, migrations)
    path.write_text("CREATE TABLE things (id bigint PRIMARY KEY);")
    write(migrations, "0002_more.sql", "CREATE TABLE more_things (id int PRIMARY KEY);")

    with pytest.raises(MigrationChecksumMismatch, match=r"0001_things\.sql"):
        await migrate(dsn, SCHEMA, migrations)

    # History is never rewritten, and nothing after the edited file runs.
    ledger = await fetch(dsn, "SELECT checksum FROM popagent_schema_migrations WHERE name = '0001_things.sql'")
    assert ledger[0]["checksum"] != sha256(path)
    assert not await table_exists(dsn, "more_things")


async def test_refuses_an_edited_data_migration_too(make_database, migrations):
    dsn = await make_database()
    write(migrations, "0001_things.sql", "CREATE TABLE things (id int PRIMARY KEY);")
    seed = write(migrations / "data", "0001_seed.sql", "INSERT INTO things VALUES (1);")
    await migrate(dsn, SCHEMA, migrations)
    seed.write_text("INSERT INTO things VALUES (2);")

    with pytest.raises(MigrationChecksumMismatch, match=r"0001_seed\.sql"):
        await migrate(dsn, SCHEMA, migrations)


@pytest.mark.parametrize("bad_name", ["1_things.sql", "0001-things.sql", "0001_Things.sql", "00001_things.sql"])
async def test_refuses_a_badly_named_file_before_applying_any_service_file(make_database, migrations, bad_name):
    dsn = await make_database()
    write(migrations, "0001_fine.sql", "CREATE TABLE fine (id int);")
    write(migrations, bad_name, "CREATE TABLE oops (id int);")

    with pytest.raises(ConfigurationError, match=bad_name.replace(".", r"\.")):
        await migrate(dsn, SCHEMA, migrations)

    assert not await table_exists(dsn, "fine")
    assert not await table_exists(dsn, "oops")


async def test_files_that_are_not_sql_are_ignored(make_database, migrations):
    dsn = await make_database()
    write(migrations, "README.md", "not a migration")
    write(migrations, "0001_things.sql", "CREATE TABLE things (id int);")

    report = await migrate(dsn, SCHEMA, migrations)

    assert report.applied == ["0001_kernel.sql", "0002_outbox_trace_context.sql", "0001_things.sql"]


async def test_a_failing_migration_leaves_no_ledger_row_and_no_partial_table(make_database, migrations):
    dsn = await make_database()
    write(migrations, "0001_fine.sql", "CREATE TABLE fine (id int);")
    # The first statement succeeds on its own; the transaction must undo it.
    broken = write(migrations, "0002_broken.sql", "CREATE TABLE half_done (id int);\nSELECT 1 / 0;")

    with pytest.raises(asyncpg.DivisionByZeroError):
        await migrate(dsn, SCHEMA, migrations)

    names = [row["name"] for row in await fetch(dsn, "SELECT name FROM popagent_schema_migrations")]
    assert sorted(names) == ["0001_fine.sql", "0001_kernel.sql", "0002_outbox_trace_context.sql"]
    assert await table_exists(dsn, "fine")
    assert not await table_exists(dsn, "half_done")

    # Fixing the file (it never applied, so editing it is allowed) lets the next run finish.
    broken.write_text("CREATE TABLE half_done (id int);")
    report = await migrate(dsn, SCHEMA, migrations)
    assert report.applied == ["0002_broken.sql"]
    assert await table_exists(dsn, "half_done")


async def test_a_data_migration_runs_once_even_after_its_seeded_row_is_deleted(make_database, migrations):
    dsn = await make_database()
    write(
        migrations,
        "0001_settings.sql",
        "CREATE TABLE settings (id int PRIMARY KEY CHECK (id = 1), on_ boolean NOT NULL);",
    )
    write(migrations / "data", "0001_seed_settings.sql", "INSERT INTO settings VALUES (1, false);")
    await migrate(dsn, SCHEMA, migrations)
    conn = await asyncpg.connect(dsn, server_settings={"search_path": SCHEMA})
    try:
        await conn.execute("DELETE FROM settings")
    finally:
        await conn.close()

    report = await migrate(dsn, SCHEMA, migrations)

    # A missing singleton is a configuration error to surface, never a reason to re-seed.
    assert report.data_applied == []
    assert await fetch(dsn, "SELECT * FROM settings") == []


async def test_schemas_are_migrated_independently(make_database, tmp_path):
    dsn = await make_database()
    write(tmp_path / "a", "0001_a.sql", "CREATE TABLE only_in_a (id int);")
    write(tmp_path / "b", "0001_b.sql", "CREATE TABLE only_in_b (id int);")

    await migrate(dsn, "svc_a", tmp_path / "a")
    report_b = await migrate(dsn, "svc_b", tmp_path / "b")

    # Each schema gets its own kernel tables and ledger.
    assert report_b.applied == ["0001_kernel.sql", "0002_outbox_trace_context.sql", "0001_b.sql"]
    conn = await asyncpg.connect(dsn)
    try:
        found = await conn.fetch(
            "SELECT table_schema, table_name FROM information_schema.tables"
            " WHERE table_name IN ('only_in_a', 'only_in_b', 'popagent_outbox') ORDER BY 1, 2"
        )
    finally:
        await conn.close()
    assert [tuple(row) for row in found] == [
        ("svc_a", "only_in_a"),
        ("svc_a", "popagent_outbox"),
        ("svc_b", "only_in_b"),
        ("svc_b", "popagent_outbox"),
    ]


def racy_migrations(directory: Path) -> None:
    """Files that fail or double up if two runners apply them at the same time."""
    write(directory, "0001_counter.sql", "CREATE TABLE counter (n int NOT NULL);")
    # The sleep keeps the first runner inside its transaction while the others arrive.
    write(directory, "0002_slow.sql", "SELECT pg_sleep(0.3);\nINSERT INTO counter VALUES (1);")
    write(directory / "data", "0001_seed.sql", "INSERT INTO counter VALUES (100);")


async def assert_applied_exactly_once(dsn: str, reports: list[tuple[list[str], list[str]]]) -> None:
    schema_files = sorted(name for applied, _ in reports for name in applied)
    data_files = sorted(name for _, data in reports for name in data)
    assert schema_files == ["0001_counter.sql", "0001_kernel.sql", "0002_outbox_trace_context.sql", "0002_slow.sql"]
    assert data_files == ["0001_seed.sql"]
    assert sorted(row["n"] for row in await fetch(dsn, "SELECT n FROM counter")) == [1, 100]


async def test_five_concurrent_runners_apply_every_file_exactly_once(make_database, migrations):
    dsn = await make_database()
    racy_migrations(migrations)

    reports = await asyncio.gather(*(migrate(dsn, SCHEMA, migrations) for _ in range(5)))

    await assert_applied_exactly_once(dsn, [(r.applied, r.data_applied) for r in reports])


_RUNNER = """
import asyncio, json, sys
from pathlib import Path
from popagent_core.migrate import migrate
report = asyncio.run(migrate(sys.argv[1], sys.argv[2], Path(sys.argv[3])))
print(json.dumps([report.applied, report.data_applied]))
"""


async def test_two_runner_processes_apply_every_file_exactly_once(make_database, migrations):
    dsn = await make_database()
    racy_migrations(migrations)

    async def run_process() -> tuple[list[str], list[str]]:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _RUNNER,
            dsn,
            SCHEMA,
            str(migrations),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=30)
        assert process.returncode == 0, stderr.decode()
        applied, data_applied = json.loads(stdout)
        return applied, data_applied

    reports = await asyncio.gather(run_process(), run_process())

    await assert_applied_exactly_once(dsn, list(reports))
