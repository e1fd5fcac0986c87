"""The error tables, the database error edge, named queries and per-service pools."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import grpc
import pytest

from popagent_core import db, errors

# google/rpc/code.proto, written out independently of the table under test.
CANONICAL_HTTP = {
    "OK": 200,
    "CANCELLED": 499,
    "UNKNOWN": 500,
    "INVALID_ARGUMENT": 400,
    "DEADLINE_EXCEEDED": 504,
    "NOT_FOUND": 404,
    "ALREADY_EXISTS": 409,
    "PERMISSION_DENIED": 403,
    "UNAUTHENTICATED": 401,
    "RESOURCE_EXHAUSTED": 429,
    "FAILED_PRECONDITION": 400,
    "ABORTED": 409,
    "OUT_OF_RANGE": 400,
    "UNIMPLEMENTED": 501,
    "INTERNAL": 500,
    "UNAVAILABLE": 503,
    "DATA_LOSS": 500,
}


def test_http_status_table_covers_every_grpc_status_code():
    missing = [code.name for code in grpc.StatusCode if code not in errors.HTTP_STATUS_BY_GRPC_CODE]

    assert missing == []


def test_http_status_table_matches_google_rpc_code_proto():
    assert {code.name: status for code, status in errors.HTTP_STATUS_BY_GRPC_CODE.items()} == CANONICAL_HTTP


def all_error_classes() -> list[type[errors.PopagentError]]:
    found, pending = [], [errors.PopagentError]
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return found


def test_every_error_class_has_a_docstring_message_and_an_http_status():
    for cls in all_error_classes():
        error = cls()
        assert error.message and error.message == (cls.__doc__ or "").strip(), cls
        assert errors.http_status_for(error) == errors.HTTP_STATUS_BY_GRPC_CODE[cls.grpc_code], cls


def test_a_status_code_maps_back_to_the_class_that_raises_it():
    for code, cls in errors.ERROR_BY_GRPC_CODE.items():
        error = errors.from_grpc_code(code, "why")
        assert type(error) is cls and error.message == "why"
        if code is not grpc.StatusCode.OUT_OF_RANGE:
            assert cls.grpc_code is code
    assert type(errors.from_grpc_code(grpc.StatusCode.DATA_LOSS, "x")) is errors.PopagentError


@pytest.fixture
async def conn(make_database):
    dsn = await make_database()
    connection = await asyncpg.connect(dsn)
    await connection.execute(
        "CREATE TABLE parent (id int PRIMARY KEY);"
        "CREATE TABLE child (id int PRIMARY KEY, parent_id int REFERENCES parent (id),"
        " size int NOT NULL CHECK (size > 0));"
        "INSERT INTO parent VALUES (1);"
    )
    try:
        yield connection
    finally:
        await connection.close()


@pytest.mark.parametrize(
    ("sql", "expected", "driver_error"),
    [
        ("INSERT INTO parent VALUES (1)", errors.AlreadyExists, asyncpg.UniqueViolationError),
        ("INSERT INTO child VALUES (1, 99, 1)", errors.NotFound, asyncpg.ForeignKeyViolationError),
        ("INSERT INTO child VALUES (1, 1, 0)", errors.InvalidArgument, asyncpg.CheckViolationError),
        ("INSERT INTO child VALUES (1, 1, NULL)", errors.InvalidArgument, asyncpg.NotNullViolationError),
        ("SELECT 'x'::int", errors.InvalidArgument, asyncpg.DataError),
        ("SELECT * FROM no_such_table", errors.StorageError, asyncpg.UndefinedTableError),
    ],
)
async def test_wrap_db_errors_translates_driver_errors_and_keeps_the_cause(conn, sql, expected, driver_error):
    with pytest.raises(errors.PopagentError) as caught, db.wrap_db_errors():
        await conn.execute(sql)

    assert type(caught.value) is expected
    assert isinstance(caught.value.__cause__, driver_error)


async def test_wrap_db_errors_translates_a_lost_connection(conn):
    await conn.close()

    with pytest.raises(errors.StorageError) as caught, db.wrap_db_errors():
        await conn.fetchval("SELECT 1")

    assert isinstance(caught.value.__cause__, asyncpg.InterfaceError)


def test_load_queries_reads_named_queries(tmp_path: Path):
    path = tmp_path / "queries.sql"
    path.write_text(
        "-- ignored preamble\n"
        "-- name: first_query\n"
        "SELECT 1\n"
        "FROM a;\n"
        "\n"
        "--name:second\n"
        "-- what the query does (its documentation, not sent)\n"
        "\n"
        "SELECT 2\n"
        "-- a comment inside the query stays\n"
        "FROM b\n"
    )

    # Each query is sent named: the name is what a query span's statement and pg_stat_activity show.
    assert db.load_queries(path) == {
        "first_query": "/* first_query */ SELECT 1\nFROM a;",
        "second": "/* second */ SELECT 2\n-- a comment inside the query stays\nFROM b",
    }


async def test_a_pool_sees_its_own_schema_first(make_database):
    dsn = await make_database()
    setup = await asyncpg.connect(dsn)
    try:
        await setup.execute(
            "CREATE SCHEMA alpha; CREATE SCHEMA beta;"
            "CREATE TABLE alpha.things (owner text); INSERT INTO alpha.things VALUES ('alpha');"
            "CREATE TABLE beta.things (owner text); INSERT INTO beta.things VALUES ('beta');"
        )
    finally:
        await setup.close()

    async with db.open_pool(dsn, "alpha") as alpha, db.open_pool(dsn, "beta") as beta:
        assert await alpha.fetchval("SELECT owner FROM things") == "alpha"
        assert await beta.fetchval("SELECT owner FROM things") == "beta"


async def test_a_pool_connection_is_released_without_a_reset_round_trip_and_with_its_transaction_ended(
    make_database,
):
    dsn = await make_database()
    async with db.open_pool(dsn, "public", min_size=1, max_size=1) as pool:
        sent: list[str] = []
        async with pool.acquire() as conn:
            conn.add_query_logger(lambda record: sent.append(record.query))
        assert await pool.fetchval("SELECT 1") == 1
        assert await pool.fetchval("SELECT 2") == 2
        # Only the queries themselves: no `RESET ALL` (and the rest of asyncpg's reset) in between.
        assert sent == ["SELECT 1", "SELECT 2"]
        # A transaction left open is still rolled back before the connection is used again.
        async with pool.acquire() as conn:
            await conn.execute("BEGIN; CREATE TABLE left_open (x int)")
        assert await pool.fetchval("SELECT to_regclass('left_open') IS NULL") is True
        # The search path, a start-up setting, survives releases.
        assert await pool.fetchval("SHOW search_path") == "public,public"


@pytest.mark.parametrize("schema", ["Upper", "1digit", "semi;colon", 'quo"te', "a" * 64, ""])
def test_schema_names_are_checked_before_use_in_sql(schema):
    with pytest.raises(ValueError, match="invalid schema name"):
        db.check_schema_name(schema)
