"""Every schema of the stack brought up to date in one process, or waited for.

    python -m popagent_core.migrate_all          apply every service's pending migrations
    python -m popagent_core.migrate_all --wait   wait until none is pending (exit 1 past --timeout-s)

Each service also migrates its own schema when it starts (`popagent_core.service`), under the same
advisory lock, so this changes nothing about what is applied; it lets a deployment run the
migrations once, before the services roll (the Kubernetes Job in deploy/kubernetes), and lets a
new service pod wait for them (its init container) instead of starting on a schema older than its
code while the old pods keep serving.

It reads DATABASE_URL (every service's schema; the migrations are the ones this image carries, in
each service package's `migrations/`) and OBSERVABILITY_DATABASE_URL (the observability store, when
set), and holds no other credential.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from popagent_core.errors import ConfigurationError
from popagent_core.migrate import migrate, pending
from popagent_core.service import schema_for
from popagent_core.settings import PostgresUrl, PostgresUrlOrNone, load_settings
from popagent_core.span_store import STORE_MIGRATIONS, STORE_SCHEMA
from popagent_core.topology import SERVICES


class MigrateSettings(BaseSettings):
    model_config = SettingsConfigDict(env_ignore_empty=True, extra="ignore", frozen=True)

    database_url: PostgresUrl = Field(validation_alias="DATABASE_URL", repr=False)
    observability_database_url: PostgresUrlOrNone = Field(
        default="", validation_alias="OBSERVABILITY_DATABASE_URL", repr=False
    )


@dataclass(frozen=True)
class Target:
    """One schema and the migrations this installation carries for it."""

    dsn: str
    schema: str
    directory: Path
    kernel: bool


def service_migrations(module: str) -> Path | None:
    """`<package>/migrations` of an installed service package, found without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    directory = Path(next(iter(spec.submodule_search_locations))) / "migrations"
    return directory if directory.is_dir() else None


def targets(settings: MigrateSettings) -> list[Target]:
    found = []
    for service in SERVICES:
        directory = service_migrations(service.module)
        if directory is not None:
            found.append(Target(settings.database_url, schema_for(service.name), directory, kernel=True))
    if settings.observability_database_url:
        found.append(Target(settings.observability_database_url, STORE_SCHEMA, STORE_MIGRATIONS, kernel=False))
    return found


async def apply_all(found: list[Target]) -> None:
    for target in found:
        report = await migrate(target.dsn, target.schema, target.directory, kernel=target.kernel)
        sys.stdout.write(
            f"{target.schema}: {len(report.applied)} schema and {len(report.data_applied)} data migrations applied\n"
        )


async def pending_all(found: list[Target]) -> list[str]:
    waiting = []
    for target in found:
        waiting += [
            f"{target.schema}/{name}"
            for name in await pending(target.dsn, target.schema, target.directory, kernel=target.kernel)
        ]
    return waiting


async def wait_all(found: list[Target], timeout_s: float, interval_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            waiting = await pending_all(found)
        except OSError as exc:
            waiting = [f"database unreachable ({type(exc).__name__})"]
        if not waiting:
            sys.stdout.write("every migration is applied\n")
            return 0
        if time.monotonic() > deadline:
            sys.stderr.write(f"migrations still pending after {timeout_s:g} s: {', '.join(waiting[:10])}\n")
            return 1
        await asyncio.sleep(interval_s)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m popagent_core.migrate_all",
        description="Migrate every schema of the stack, or wait until none is pending.",
    )
    parser.add_argument("--wait", action="store_true", help="apply nothing; wait until no migration is pending")
    parser.add_argument("--timeout-s", type=float, default=600.0)
    parser.add_argument("--interval-s", type=float, default=2.0)
    args = parser.parse_args(argv)
    settings = load_settings(MigrateSettings, "migrate")
    found = targets(settings)
    try:
        if args.wait:
            raise SystemExit(asyncio.run(wait_all(found, args.timeout_s, args.interval_s)))
        asyncio.run(apply_all(found))
    except ConfigurationError as exc:
        # An applied migration edited since: the schema and this image disagree; nothing is applied.
        sys.stderr.write(f"popagent-migrate: {exc}\n")
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
