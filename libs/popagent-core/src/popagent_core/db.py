"""asyncpg pool per service and the database error edge.

Each service's pool has `search_path` set to its own schema, so its SQL names its
tables plainly (`popagent_hook_runs`) and can never reach another service's tables by
accident. Nothing above a repository imports asyncpg exceptions: `wrap_db_errors`
translates them once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import asyncpg

from popagent_core.errors import AlreadyExists, Conflict, InvalidArgument, NotFound, StorageError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

Record = TypeVar("Record", bound="DataclassInstance")

_SCHEMA_NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")


def check_schema_name(schema: str) -> str:
    if not _SCHEMA_NAME.match(schema):
        raise ValueError(f"invalid schema name {schema!r}")
    return schema


@contextlib.asynccontextmanager
async def open_pool(
    dsn: str, schema: str, *, min_size: int = 1, max_size: int = 10, application_name: str = "popagent"
) -> AsyncIterator[asyncpg.Pool]:
    """A pool whose connections see `schema` first (then `public`, for extensions).

    A connection goes back to the pool without asyncpg's reset query (`pg_advisory_unlock_all`,
    `CLOSE ALL`, `UNLISTEN *`, `RESET ALL`): that is a round trip on every release, and a release
    ends every `pool.fetch*`/`execute` before its result is returned, so each one cost two round
    trips. Pool code keeps no session state to reset: `search_path` and `application_name` are
    start-up settings, advisory locks and cursors are transaction-scoped, and the outbox relay
    undoes its own LISTEN. asyncpg still rolls back a transaction left open. Keep it so: use
    `SET LOCAL` and `pg_advisory_xact_lock`, never their session forms, on a pool connection.
    """
    check_schema_name(schema)
    pool = await asyncpg.create_pool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        server_settings={"search_path": f"{schema},public", "application_name": application_name},
        reset=_keep_session,
    )
    try:
        yield pool
    finally:
        await pool.close()


async def _keep_session(connection: asyncpg.Connection) -> None:
    """No reset query on release (see `open_pool`)."""


def _constraint(exc: asyncpg.PostgresError) -> str:
    # asyncpg sets the server's error fields as attributes at run time.
    return str(getattr(exc, "constraint_name", "") or "")


@contextlib.contextmanager
def wrap_db_errors() -> Iterator[None]:
    """Translate driver errors into the popagent error tree (driver error on __cause__)."""
    try:
        yield
    except asyncpg.UniqueViolationError as exc:
        raise AlreadyExists(f"already exists ({_constraint(exc)})") from exc
    except asyncpg.SerializationError as exc:
        raise Conflict("concurrent update; retry") from exc
    except asyncpg.ForeignKeyViolationError as exc:
        raise NotFound(f"referenced row not found ({_constraint(exc)})") from exc
    except (asyncpg.CheckViolationError, asyncpg.NotNullViolationError, asyncpg.DataError) as exc:
        raise InvalidArgument(f"invalid value ({type(exc).__name__})") from exc
    # InternalClientError: what asyncpg raises when releasing a connection the server severed.
    except (asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.InternalClientError, OSError) as exc:
        raise StorageError(f"database error: {type(exc).__name__}") from exc


def record_of(record_type: type[Record], row: asyncpg.Record | Mapping[str, Any], **converted: object) -> Record:
    """A row (or a row decoded from JSON) as its typed record: each field from the column of its name,
    `converted` for the ones that take another type (an enum, a uuid as text) or another column."""
    columns = {field.name: row[field.name] for field in dataclasses.fields(record_type) if field.name not in converted}
    return record_type(**columns, **converted)


def load_queries(path: Path) -> dict[str, str]:
    """Named queries from one .sql file: each starts with a `-- name: <query_name>` line.

    Keeps SQL as SQL (procrastinate's queries.sql habit) while giving code a name to call. The
    comment lines right under the name document the query in the file; what is sent is the query
    named in a leading `/* name */` (seen in `pg_stat_activity` and in a query span's statement),
    then the SQL with any comments inside it. A leading `--` line would also be what the asyncpg
    instrumentation names the span by: it strips only a leading `/* */` to find the operation.
    """
    queries: dict[str, str] = {}
    name: str | None = None
    lines: list[str] = []

    def finish() -> None:
        assert name is not None
        body = "\n".join(lines).strip().splitlines()
        while body and (not body[0].strip() or body[0].lstrip().startswith("--")):
            body.pop(0)
        queries[name] = f"/* {name} */ " + "\n".join(body)

    for line in path.read_text().splitlines():
        header = re.match(r"^--\s*name:\s*(\w+)\s*$", line)
        if header:
            if name:
                finish()
            name, lines = header.group(1), []
        elif name is not None:
            lines.append(line)
    if name:
        finish()
    return queries
