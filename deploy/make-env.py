"""Print a fresh deploy/.env for deploy/compose.yaml, with new random secrets.

    .venv/bin/python deploy/make-env.py > deploy/.env && chmod 600 deploy/.env

deploy/.env.example is the template: every variable it lists is printed, in its order
and with its comments; the secrets are replaced by fresh random values (PostgreSQL
password, also inside both database URLs; API key; secret key; SearXNG secret; internal
credentials from `popagent_core.auth.generate_credentials`). Everything else keeps the
template's value, to be edited afterwards (model gateway, hooks, log level). Each gRPC service
gets the digests of its own callers only (`popagent_core.topology.CALLERS`), and each service a
NATS password of its own (the users of deploy/nats/nats.conf).

    .venv/bin/python deploy/make-env.py nats-conf > deploy/nats/nats.conf

prints the NATS users and their subject permissions (`popagent_dev.embedded.nats_authorization`,
the same `make run` gives its NATS), each password read from the NATS container's environment.

    .venv/bin/python deploy/make-env.py kubernetes DIR [--database-url URL --observability-database-url URL]

writes the env files the Kubernetes overlays build their Secrets from (deploy/kubernetes), one per
process: `<service>.env` for each service with exactly the credentials
`popagent_core.topology.SECRET_VARIABLES` gives it, `migrate.env` (the two database URLs),
`nats.env` (every NATS user's password), `searxng.env` and, without database URLs (the
single-node overlay's own PostgreSQL), `postgres.env`. NINEROUTER_API_KEY and POPAGENT_HOOKS are
taken from this command's environment when set. Existing files are never overwritten: a new
POPAGENT_SECRET_KEY would make the stored secrets unreadable.

Values are written unquoted on one line and contain no `$`, `#`, quote or space where a
compose .env parser would read them specially (the JSON of POPAGENT_INTERNAL_CALLERS has
quotes inside, never at the start).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import secrets
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from popagent_core.credentials import generate_credentials
from popagent_core.topology import CALLERS, SECRET_VARIABLES, SERVICE_NAMES

TEMPLATE = Path(__file__).resolve().with_name(".env.example")
DATABASE_URL_VARIABLES = ("DATABASE_URL", "OBSERVABILITY_DATABASE_URL")


def _variable(prefix: str, service: str) -> str:
    return prefix + service.upper().replace("-", "_")


def token_variable(service: str) -> str:
    """The .env variable holding one service's internal token (mapped by compose)."""
    return _variable("POPAGENT_TOKEN_", service)


def callers_variable(service: str) -> str:
    """The .env variable holding the digests of one gRPC service's callers (its POPAGENT_INTERNAL_CALLERS)."""
    return _variable("POPAGENT_CALLERS_", service)


def nats_password_variable(service: str) -> str:
    """The .env variable holding one service's NATS password (in its NATS_URL, and the NATS container's)."""
    return _variable("NATS_PASSWORD_", service)


def fresh_secrets() -> dict[str, str]:
    tokens, callers = generate_credentials(SERVICE_NAMES)
    digests = json.loads(callers)
    values = {
        # Hex: safe inside a URL's userinfo without quoting.
        "POSTGRES_PASSWORD": secrets.token_hex(24),
        "POPAGENT_API_KEY": secrets.token_urlsafe(32),
        "POPAGENT_SECRET_KEY": base64.b64encode(secrets.token_bytes(32)).decode("ascii"),
        "SEARXNG_SECRET": secrets.token_hex(32),
    }
    values.update({token_variable(service): tokens[service] for service in SERVICE_NAMES})
    values.update({nats_password_variable(service): secrets.token_hex(24) for service in SERVICE_NAMES})
    for service, allowed in CALLERS.items():
        # Compact JSON: no spaces for an env-file parser to trim or split on.
        own = {caller: digests[caller] for caller in sorted(allowed)}
        values[callers_variable(service)] = json.dumps(own, separators=(",", ":"), sort_keys=True)
    return values


def nats_conf() -> str:
    """deploy/nats/nats.conf: the users of `make run`'s NATS, each password a variable of the container."""
    from popagent_dev.embedded import nats_authorization

    header = (
        "# popagent's NATS users: one per service, each allowed only the subjects it uses, and no\n"
        "# client without a user. Generated: `.venv/bin/python deploy/make-env.py nats-conf > deploy/nats/nats.conf`\n"
        "# (tests/deploy checks it is current). Each password is read from the NATS container's environment.\n"
    )
    return header + nats_authorization({service: "$" + nats_password_variable(service) for service in SERVICE_NAMES})


def with_password(url: str, password: str) -> str:
    parts = urlsplit(url)
    if not parts.username or not parts.hostname:
        raise SystemExit(f"make-env: the template's database URL has no user or host: {url}")
    host = parts.hostname if parts.port is None else f"{parts.hostname}:{parts.port}"
    return urlunsplit(parts._replace(netloc=f"{parts.username}:{password}@{host}"))


def render(template: str, values: dict[str, str]) -> str:
    lines = template.splitlines()
    # The template's opening comment block is about the template; say where this file came from.
    while lines and lines[0].startswith("#"):
        lines.pop(0)
    out = [
        "# popagent deploy/.env, generated by deploy/make-env.py. Keep it private (chmod 600),",
        "# out of git, and backed up: POPAGENT_SECRET_KEY decrypts the stored secrets.",
    ]
    seen: set[str] = set()
    for line in lines:
        key, sep, value = line.partition("=")
        if not sep or line.lstrip().startswith("#"):
            out.append(line)
            continue
        key = key.strip()
        if key in values:
            value = values[key]
        elif key in DATABASE_URL_VARIABLES:
            value = with_password(value, values["POSTGRES_PASSWORD"])
        out.append(f"{key}={value}")
        seen.add(key)
    missing = sorted(set(values) - seen)
    if missing:
        raise SystemExit(f"make-env: {TEMPLATE.name} does not list {', '.join(missing)}")
    return "\n".join(out) + "\n"


# The NATS servers of deploy/kubernetes/base/nats.yaml: a client lists all three, so it fails over
# to another at once.
KUBERNETES_NATS_SERVERS = tuple(f"nats-{number}.nats-headless:4222" for number in range(3))
KUBERNETES_POSTGRES = "postgres:5432"
# What the user may give through this command's environment, for the processes that hold it.
FROM_ENVIRONMENT = ("NINEROUTER_API_KEY", "POPAGENT_HOOKS")


def kubernetes_env_files(database_url: str, observability_database_url: str) -> dict[str, dict[str, str]]:
    """Every Secret's content, by the file name it is read from (without `.env`)."""
    values = fresh_secrets()
    files: dict[str, dict[str, str]] = {}
    if not database_url:
        password = values["POSTGRES_PASSWORD"]
        database_url = f"postgresql://popagent:{password}@{KUBERNETES_POSTGRES}/popagent"
        observability_database_url = f"postgresql://popagent:{password}@{KUBERNETES_POSTGRES}/popagent_observability"
        files["postgres"] = {"POSTGRES_PASSWORD": password}
    for service in SERVICE_NAMES:
        nats_password = values[nats_password_variable(service)]
        own = {
            "DATABASE_URL": database_url,
            "OBSERVABILITY_DATABASE_URL": observability_database_url,
            "NATS_URL": ",".join(f"nats://{service}:{nats_password}@{server}" for server in KUBERNETES_NATS_SERVERS),
            "POPAGENT_INTERNAL_TOKEN": values[token_variable(service)],
            "POPAGENT_INTERNAL_CALLERS": values.get(callers_variable(service), ""),
            "POPAGENT_API_KEY": values["POPAGENT_API_KEY"],
            "POPAGENT_SECRET_KEY": values["POPAGENT_SECRET_KEY"],
            "POPAGENT_SECRET_PREVIOUS_KEYS": "",
            **{variable: os.environ.get(variable, "") for variable in FROM_ENVIRONMENT},
        }
        unknown = sorted(set(SECRET_VARIABLES) - set(own))
        if unknown:
            raise SystemExit(f"make-env: no value for {', '.join(unknown)} (popagent_core.topology.SECRET_VARIABLES)")
        files[service] = {
            variable: own[variable] for variable in SECRET_VARIABLES if service in SECRET_VARIABLES[variable]
        }
    files["migrate"] = {"DATABASE_URL": database_url, "OBSERVABILITY_DATABASE_URL": observability_database_url}
    files["nats"] = {
        nats_password_variable(service): values[nats_password_variable(service)] for service in SERVICE_NAMES
    }
    files["searxng"] = {"SEARXNG_SECRET": values["SEARXNG_SECRET"]}
    return files


def write_kubernetes(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="make-env.py kubernetes")
    parser.add_argument("directory", type=Path, help="the overlay's secrets/ folder")
    parser.add_argument(
        "--database-url", default="", help="the application PostgreSQL (default: the single-node overlay's)"
    )
    parser.add_argument("--observability-database-url", default="", help="the observability PostgreSQL")
    args = parser.parse_args(argv)
    if bool(args.database_url) != bool(args.observability_database_url):
        raise SystemExit("make-env: give both --database-url and --observability-database-url, or neither")
    for url in (args.database_url, args.observability_database_url):
        if url and not url.startswith(("postgresql://", "postgres://")):
            raise SystemExit("make-env: a database URL must be a postgresql:// URL")
    files = kubernetes_env_files(args.database_url, args.observability_database_url)
    if any("\n" in value for content in files.values() for value in content.values()):
        raise SystemExit("make-env: POPAGENT_HOOKS must be one line (an env file holds one line per variable)")
    directory: Path = args.directory
    directory.mkdir(parents=True, exist_ok=True)
    existing = sorted(name for name in files if (directory / f"{name}.env").exists())
    if existing:
        raise SystemExit(
            f"make-env: {', '.join(f'{name}.env' for name in existing)} already in {directory}; "
            "a new POPAGENT_SECRET_KEY would make the stored secrets unreadable, so nothing was written"
        )
    for name, content in files.items():
        text = "".join(f"{variable}={value}\n" for variable, value in content.items())
        with os.fdopen(os.open(directory / f"{name}.env", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as file:
            file.write(text)
    sys.stdout.write(f"wrote {', '.join(f'{name}.env' for name in files)} to {directory}\n")


def main() -> None:
    if sys.argv[1:] == ["nats-conf"]:
        sys.stdout.write(nats_conf())
        return
    if sys.argv[1:2] == ["kubernetes"]:
        write_kubernetes(sys.argv[2:])
        return
    sys.stdout.write(render(TEMPLATE.read_text(), fresh_secrets()))


if __name__ == "__main__":
    main()
