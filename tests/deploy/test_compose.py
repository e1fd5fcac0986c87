"""deploy/compose.yaml, deploy/.env.example and deploy/make-env.py agree with each other and with the code.

The compose CLI (`docker compose` or `docker-compose`) checks the file where one is
installed; everything else runs everywhere: the YAML is loaded and interpolated here the
way compose does it, validated against the Compose Specification schema, and every
popagent container's environment is fed to that service's own settings class.

tests/deploy/compose_spec.json is the Compose Specification JSON schema exactly as
shipped in the `docker-compose` 1.29.2 package on PyPI (compose/config/compose_spec.json,
Apache-2.0); no current package ships a newer one as a file.
"""

from __future__ import annotations

import base64
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import grpc
import jsonschema
import pytest
import yaml
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from popagent_core import topology
from popagent_core.auth import CallerRegistry
from popagent_core.errors import Unauthenticated
from popagent_dev.embedded import free_port, nats_authorization

REPO_ROOT = Path(__file__).resolve().parents[2]
DEPLOY = REPO_ROOT / "deploy"
COMPOSE_FILE = DEPLOY / "compose.yaml"
ENV_EXAMPLE = DEPLOY / ".env.example"
MAKE_ENV = DEPLOY / "make-env.py"
SCHEMA_FILE = Path(__file__).with_name("compose_spec.json")
NATS_CONFIG = DEPLOY / "nats" / "nats.conf"

# The stack's services as the kernel lists them (popagent_core.topology): compose must run exactly these.
POPAGENT_SERVICES = topology.SERVICE_NAMES
GRPC_SERVICES = tuple(service.name for service in topology.GRPC_SERVICES)
INFRASTRUCTURE = ("postgres", "observability-postgres", "nats", "searxng", "proxy")
HAPROXY_CONFIG = DEPLOY / "haproxy" / "haproxy.cfg"
SECRET_KEY_VARIABLES = ("POPAGENT_SECRET_KEY", "POPAGENT_SECRET_PREVIOUS_KEYS")
# Read by the compose CLI itself (project name...), never interpolated into the file.
COMPOSE_CLI_PREFIX = "COMPOSE_"

# ${NAME}, ${NAME:-default}, ${NAME-default}, ${NAME:?error}, ${NAME?error}, ${NAME:+alt}, ${NAME+alt}
REFERENCE = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>[^}]*))?\}")
ENV_LINE = re.compile(r"^(?P<key>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>.*)$")


# ---- helpers: what compose does with the file and the env file -------------------------


class MissingVariable(Exception):
    """A ${NAME:?message} reference whose variable is unset or empty."""


def parse_env_file(text: str) -> dict[str, str]:
    """KEY=VALUE lines (comments and blank lines skipped); anything else is an error."""
    values: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = ENV_LINE.match(line)
        assert match, f"line {number} is not KEY=VALUE: {line!r}"
        assert match["key"] not in values, f"line {number}: {match['key']} is set twice"
        values[match["key"]] = match["value"]
    return values


def interpolate_text(text: str, env: dict[str, str]) -> str:
    def replace(match: re.Match[str]) -> str:
        name, op, arg = match["name"], match["op"], match["arg"] or ""
        value = env.get(name)
        if op is None:
            return value or ""
        if op == ":-":
            return value or arg
        if op == "-":
            return arg if value is None else value
        if op == ":?":
            if not value:
                raise MissingVariable(f"{name}: {arg}")
            return value
        if op == "?":
            if value is None:
                raise MissingVariable(f"{name}: {arg}")
            return value
        if op == ":+":
            return arg if value else ""
        return "" if value is None else arg  # "+"

    # "$$" is a literal dollar sign, never the start of a reference.
    return "$".join(REFERENCE.sub(replace, part) for part in text.split("$$"))


def interpolate(node: Any, env: dict[str, str]) -> Any:
    if isinstance(node, str):
        return interpolate_text(node, env)
    if isinstance(node, dict):
        return {key: interpolate(value, env) for key, value in node.items()}
    if isinstance(node, list):
        return [interpolate(item, env) for item in node]
    return node


def strings_in(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield str(key)
            yield from strings_in(value)
    elif isinstance(node, list):
        for item in node:
            yield from strings_in(item)


def references_in(node: Any) -> set[str]:
    return {match["name"] for text in strings_in(node) for match in REFERENCE.finditer(text.replace("$$", ""))}


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    assert isinstance(env, dict), "environment must be a mapping (the anchors merge mappings)"
    return {str(key): "" if value is None else str(value) for key, value in env.items()}


def token_variable(service: str) -> str:
    return "POPAGENT_TOKEN_" + service.upper().replace("-", "_")


def callers_variable(service: str) -> str:
    return "POPAGENT_CALLERS_" + service.upper().replace("-", "_")


def nats_password_variable(service: str) -> str:
    return "NATS_PASSWORD_" + service.upper().replace("-", "_")


def address_variable(service: str) -> str:
    return topology.service_named(service).address_variable


def run_make_env(cwd: Path) -> str:
    result = subprocess.run(
        [sys.executable, str(MAKE_ENV)], cwd=cwd, capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def run_make_env_command(arguments: list[str]) -> str:
    result = subprocess.run(
        [sys.executable, str(MAKE_ENV), *arguments], capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def compose_cli() -> list[str] | None:
    docker = shutil.which("docker")
    if docker:
        probe = subprocess.run([docker, "compose", "version"], capture_output=True, timeout=30, check=False)
        if probe.returncode == 0:
            return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    return [legacy] if legacy else None


def cli_env() -> dict[str, str]:
    # Only what the CLI needs: a variable in the test's own environment would win over the env file.
    return {key: os.environ[key] for key in ("PATH", "HOME", "LANG") if key in os.environ}


# ---- fixtures ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def raw() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_FILE.read_text())


@pytest.fixture(scope="module")
def example_env() -> dict[str, str]:
    return parse_env_file(ENV_EXAMPLE.read_text())


@pytest.fixture(scope="module")
def generated_text(tmp_path_factory: pytest.TempPathFactory) -> str:
    return run_make_env(tmp_path_factory.mktemp("make-env"))


@pytest.fixture(scope="module")
def generated_env(generated_text: str) -> dict[str, str]:
    return parse_env_file(generated_text)


@pytest.fixture(scope="module")
def config(raw: dict[str, Any], generated_env: dict[str, str]) -> dict[str, Any]:
    """The file as compose sees it with a deploy/.env from make-env.py."""
    return interpolate(raw, generated_env)


@pytest.fixture(scope="module")
def services(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return config["services"]


# ---- the compose CLI, where there is one ----------------------------------------------


def compose_config(cli: list[str], env_file: Path) -> subprocess.CompletedProcess[str]:
    """`compose config -q` on the compose file with this env file: it exits non-zero on what compose refuses."""
    return subprocess.run(
        [*cli, "-f", str(COMPOSE_FILE), "--env-file", str(env_file), "config", "-q"],
        capture_output=True,
        text=True,
        timeout=60,
        env=cli_env(),
        check=False,
    )


@pytest.mark.parametrize("env_source", ["example", "make-env"])
def test_compose_cli_accepts_the_file(env_source: str, generated_text: str, tmp_path: Path) -> None:
    cli = compose_cli()
    if cli is None:
        pytest.skip("no compose CLI here (neither `docker compose` nor `docker-compose`); structural tests still run")
    env_file = ENV_EXAMPLE
    if env_source == "make-env":
        env_file = tmp_path / ".env"
        env_file.write_text(generated_text)
    result = compose_config(cli, env_file)
    assert result.returncode == 0, result.stderr


def test_compose_cli_refuses_a_missing_secret(tmp_path: Path) -> None:
    cli = compose_cli()
    if cli is None:
        pytest.skip("no compose CLI here; the interpolation test below covers required variables")
    env_file = tmp_path / ".env"
    env_file.write_text(
        "".join(
            line + "\n" for line in ENV_EXAMPLE.read_text().splitlines() if not line.startswith("POPAGENT_SECRET_KEY=")
        )
    )
    result = compose_config(cli, env_file)
    assert result.returncode != 0
    assert "POPAGENT_SECRET_KEY" in result.stderr


# ---- structure --------------------------------------------------------------------------


def test_the_compose_file_follows_the_compose_specification(config: dict[str, Any]) -> None:
    schema = json.loads(SCHEMA_FILE.read_text())
    validator = jsonschema.Draft201909Validator(schema)
    errors = [f"{'/'.join(map(str, error.absolute_path))}: {error.message}" for error in validator.iter_errors(config)]
    assert errors == []
    # The schema is strict enough to catch a misspelt key.
    broken = json.loads(json.dumps(config))
    broken["services"]["gateway"]["healthchek"] = broken["services"]["gateway"].pop("healthcheck")
    assert not validator.is_valid(broken)


def test_every_service_of_the_stack_is_there(services: dict[str, Any]) -> None:
    assert sorted(services) == sorted((*POPAGENT_SERVICES, *INFRASTRUCTURE))


def test_infrastructure_images(services: dict[str, Any]) -> None:
    assert services["postgres"]["image"] == services["observability-postgres"]["image"] == "pgvector/pgvector:pg16"
    assert services["nats"]["image"].startswith("nats:2")
    assert services["nats"]["command"][:3] == ["-js", "-sd", "/data"]
    # Its users: a client without one is refused.
    config = services["nats"]["command"][services["nats"]["command"].index("-c") + 1]
    assert f"./nats/nats.conf:{config}:ro" in services["nats"]["volumes"]
    assert services["searxng"]["image"].startswith("searxng/searxng")
    settings_mount = DEPLOY / "searxng" / "settings.yml"
    assert any(volume.startswith("./searxng/settings.yml:") for volume in services["searxng"]["volumes"])
    searxng_settings = yaml.safe_load(settings_mount.read_text())
    # webSearch reads the JSON API (SearXNG ships html only) and must not meet the limiter,
    # which caps format=json at 4 requests an hour per IP.
    assert searxng_settings["search"]["formats"] == ["html", "json"]
    assert searxng_settings["server"]["limiter"] is False
    assert searxng_settings["server"]["public_instance"] is False
    assert any(
        volume.startswith("./searxng/limiter.toml:/etc/searxng/limiter.toml")
        for volume in services["searxng"]["volumes"]
    )
    limiter = tomllib.loads((DEPLOY / "searxng" / "limiter.toml").read_text())
    assert {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"} <= set(limiter["botdetection"]["ip_lists"]["pass_ip"])


def test_popagent_services_run_their_own_module_from_one_image(services: dict[str, Any]) -> None:
    images = {
        name: (services[name]["image"], json.dumps(services[name]["build"], sort_keys=True))
        for name in POPAGENT_SERVICES
    }
    assert len(set(images.values())) == 1, images
    build = services["gateway"]["build"]
    assert (COMPOSE_FILE.parent / build["context"] / build["dockerfile"]).resolve() == (DEPLOY / "Dockerfile").resolve()
    for service in topology.SERVICES:
        assert services[service.name]["command"] == ["python", "-m", service.module], service.name
        assert (REPO_ROOT / "services" / service.name / "src" / service.module / "__main__.py").is_file(), service.name


def test_every_container_restarts_by_itself(services: dict[str, Any]) -> None:
    """Issue 22: production keeps the supervision make run has. (`always` or `unless-stopped`:
    `on-failure` would leave a service that exited 0 on a stray SIGTERM stopped.)"""
    for name in (*POPAGENT_SERVICES, *INFRASTRUCTURE):
        assert services[name].get("restart") in ("always", "unless-stopped"), name


def test_start_order_waits_only_on_health_that_is_checked(services: dict[str, Any]) -> None:
    for name, service in services.items():
        depends_on = service.get("depends_on", {})
        assert isinstance(depends_on, dict), f"{name}: use the long depends_on form with conditions"
        for target, condition in depends_on.items():
            assert target in services, f"{name} depends on unknown {target}"
            assert condition["condition"] in ("service_healthy", "service_started"), (name, target)
            if condition["condition"] == "service_healthy":
                check = services[target].get("healthcheck")
                assert check and not check.get("disable") and check.get("test"), (
                    f"{name} waits for {target}'s health, which is not checked"
                )
    for name in POPAGENT_SERVICES:
        waits_for = {
            target for target, c in services[name]["depends_on"].items() if c["condition"] == "service_healthy"
        }
        assert {"postgres", "observability-postgres", "nats"} <= waits_for, name
        assert services[name]["healthcheck"]["test"][0] == "CMD"
    gateway_waits = {t for t, c in services["gateway"]["depends_on"].items() if c["condition"] == "service_healthy"}
    assert set(GRPC_SERVICES) <= gateway_waits


def test_start_order_has_no_cycle(services: dict[str, Any]) -> None:
    state: dict[str, str] = {}

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert state.get(name) != "open", f"depends_on cycle: {' -> '.join((*path, name))}"
        if state.get(name) == "done":
            return
        state[name] = "open"
        for target in services[name].get("depends_on", {}):
            visit(target, (*path, name))
        state[name] = "done"

    for name in services:
        visit(name, ())


def test_only_the_edge_proxy_publishes_a_port(services: dict[str, Any]) -> None:
    publishing = {name for name, service in services.items() if service.get("ports")}
    assert publishing == {"proxy"}
    assert all(service.get("network_mode") is None for service in services.values())
    (published,) = services["proxy"]["ports"]
    gateway_port = environment(services["gateway"])["POPAGENT_GATEWAY_PORT"]
    assert [str(port) for port in services["gateway"]["expose"]] == [gateway_port]
    assert environment(services["gateway"])["POPAGENT_GATEWAY_HOST"] == "0.0.0.0"
    # The proxy listens where it is published and forwards to the gateway's port.
    config = haproxy_config()
    assert f"bind :{str(published).split(':')[-1]}" in config["frontend popagent"]
    assert any(line.startswith(f"server gateway gateway:{gateway_port} ") for line in config["backend gateway"])
    assert services["proxy"]["depends_on"]["gateway"]["condition"] == "service_healthy"


def haproxy_config() -> dict[str, list[str]]:
    """deploy/haproxy/haproxy.cfg as its sections (`global`, `defaults`, `frontend NAME`...),
    each a list of its directive lines without comments."""
    sections: dict[str, list[str]] = {}
    current: list[str] = []
    for raw in HAPROXY_CONFIG.read_text().splitlines():
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        if not line[0].isspace():
            current = sections.setdefault(line.strip(), [])
        else:
            current.append(" ".join(line.split()))
    return sections


def seconds(value: str) -> float:
    number, unit = re.fullmatch(r"(\d+)(ms|s|m|h)?", value).groups()  # type: ignore[union-attr]
    return int(number) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 0.001}[unit]


def test_the_edge_proxy_holds_the_gateways_connection_limits(services: dict[str, Any]) -> None:
    """Issue 23: the proxy in front bounds the request head (however it trickles), idle keep-alive
    connections and its connection count (503 + Retry-After), no looser than the gateway's own."""
    from popagent_gateway.settings import Settings as GatewaySettings

    gateway = GatewaySettings.model_fields
    defaults = {
        line.split()[1]: line.split()[2] for line in haproxy_config()["defaults"] if line.startswith("timeout ")
    }
    assert "option http-buffer-request" in haproxy_config()["defaults"]
    assert seconds(defaults["http-request"]) <= gateway["header_timeout_s"].default
    assert seconds(defaults["http-keep-alive"]) <= gateway["idle_timeout_s"].default
    for name in ("client", "server", "connect", "client-fin"):
        assert name in defaults, f"timeout {name} unset: HAProxy would wait for ever"
    frontend = haproxy_config()["frontend popagent"]
    (maxconn,) = (int(line.split()[1]) for line in frontend if line.startswith("maxconn "))
    (refusal,) = (line for line in frontend if line.startswith("http-request return status 503 "))
    assert "hdr retry-after 1" in refusal
    threshold = int(re.search(r"fe_conn gt (\d+)", refusal).group(1))  # type: ignore[union-attr]
    assert threshold < maxconn <= gateway["max_connections"].default
    (body_bound,) = (line for line in frontend if "deny_status 413" in line)
    assert str(gateway["max_body_bytes"].default) in body_bound
    assert services["proxy"]["image"].startswith("haproxy:")


@pytest.mark.skipif(shutil.which("haproxy") is None, reason="haproxy (a Debian package) checks its own configuration")
def test_haproxy_accepts_its_configuration() -> None:
    result = subprocess.run(
        ["haproxy", "-c", "-f", str(HAPROXY_CONFIG)], capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_grpc_addresses_agree_between_binder_dialers_and_probe(services: dict[str, Any]) -> None:
    ports: dict[str, str] = {}
    for name in GRPC_SERVICES:
        bind = environment(services[name])[address_variable(name)]
        host, _, port = bind.rpartition(":")
        assert host == "0.0.0.0", f"{name} must bind every interface of its container, not {bind}"
        assert services[name]["healthcheck"]["test"][-1] == f"127.0.0.1:{port}", name
        ports[name] = port
    assert len(set(ports.values())) == len(ports)
    # Inside the compose network every service keeps the kernel's default port, so one list says where each listens.
    assert ports == {service.name: str(service.grpc_port) for service in topology.GRPC_SERVICES}
    for caller in POPAGENT_SERVICES:
        env = environment(services[caller])
        for name in GRPC_SERVICES:
            if name != caller:
                assert env[address_variable(name)] == f"{name}:{ports[name]}", (caller, name)


def test_the_env_example_lists_exactly_what_compose_reads(raw: dict[str, Any], example_env: dict[str, str]) -> None:
    # Every reference is braced, so the pattern sees all of them (the x- blocks included).
    assert [text for text in strings_in(raw) if re.search(r"\$(?!\{)", text.replace("$$", ""))] == []
    referenced = references_in(raw)
    listed = {key for key in example_env if not key.startswith(COMPOSE_CLI_PREFIX)}
    assert sorted(referenced - listed) == [], "read by compose.yaml but missing from .env.example"
    assert sorted(listed - referenced) == [], "listed in .env.example but never passed to a container"
    assert example_env.get("COMPOSE_PROJECT_NAME") == "popagent"


def test_required_variables_stop_compose_with_their_name(raw: dict[str, Any], example_env: dict[str, str]) -> None:
    for variable in ("POPAGENT_SECRET_KEY", "DATABASE_URL", "POSTGRES_PASSWORD", token_variable("secrets")):
        env = {key: value for key, value in example_env.items() if key != variable}
        with pytest.raises(MissingVariable, match=variable):
            interpolate(raw, env)


def test_each_service_gets_its_own_internal_token(
    raw: dict[str, Any], services: dict[str, Any], generated_env: dict[str, str]
) -> None:
    for name in POPAGENT_SERVICES:
        declared = raw["services"][name]["environment"]["POPAGENT_INTERNAL_TOKEN"]
        assert {match["name"] for match in REFERENCE.finditer(declared)} == {token_variable(name)}, name
        others = set(POPAGENT_SERVICES) - {name}
        assert references_in(raw["services"][name]) & {token_variable(o) for o in others} == set(), name
    tokens = {name: environment(services[name])["POPAGENT_INTERNAL_TOKEN"] for name in POPAGENT_SERVICES}
    assert len(set(tokens.values())) == len(tokens)
    for name in GRPC_SERVICES:
        # Each gRPC service knows its own callers only: another service's token is refused there.
        registry = CallerRegistry.from_json(environment(services[name])["POPAGENT_INTERNAL_CALLERS"])
        for caller, token in tokens.items():
            if caller in topology.CALLERS[name]:
                assert registry.authenticate(token) == caller
            else:
                with pytest.raises(Unauthenticated):
                    registry.authenticate(token)
        with pytest.raises(Unauthenticated):
            registry.authenticate(f"{name}.not-its-token")
    assert "POPAGENT_INTERNAL_CALLERS" not in environment(services["gateway"])


def test_each_container_gets_the_credentials_the_table_gives_its_service(raw: dict[str, Any]) -> None:
    """The same scoping as `make run`'s launcher: popagent_core.topology.SECRET_VARIABLES."""
    for name in POPAGENT_SERVICES:
        env = environment(raw["services"][name])
        carried = {variable for variable in env if variable in topology.SECRET_VARIABLES}
        carried |= {variable for variable in env if topology.CREDENTIAL_NAME.search(variable)}
        held = {variable for variable, holders in topology.SECRET_VARIABLES.items() if name in holders}
        assert carried == held, (name, sorted(carried ^ held))


def test_each_service_has_its_own_nats_user(
    raw: dict[str, Any], services: dict[str, Any], generated_env: dict[str, str]
) -> None:
    for name in POPAGENT_SERVICES:
        url = urlsplit(environment(services[name])["NATS_URL"])
        assert (url.scheme, url.hostname, url.port) == ("nats", "nats", 4222), name
        assert url.username == name
        assert url.password == generated_env[nats_password_variable(name)], name
        others = {nats_password_variable(other) for other in POPAGENT_SERVICES if other != name}
        assert references_in(raw["services"][name]) & others == set(), name
    # The NATS container has every user's password, for its configuration to read.
    assert set(environment(raw["services"]["nats"])) == {nats_password_variable(name) for name in POPAGENT_SERVICES}
    passwords = [generated_env[nats_password_variable(name)] for name in POPAGENT_SERVICES]
    assert len(set(passwords)) == len(passwords)


def test_the_nats_configuration_is_the_one_make_run_uses() -> None:
    """deploy/nats/nats.conf is `make run`'s authorization with each password a container variable:
    regenerate it with `make-env.py nats-conf` when a service's subjects change."""
    expected = nats_authorization({name: "$" + nats_password_variable(name) for name in POPAGENT_SERVICES})
    text = NATS_CONFIG.read_text()
    assert text.endswith(expected)
    assert all(line.startswith("#") for line in text.removesuffix(expected).splitlines())
    assert text == run_make_env_command(["nats-conf"])


def test_the_secret_key_reaches_only_the_secrets_service(raw: dict[str, Any], services: dict[str, Any]) -> None:
    assert all("env_file" not in service for service in services.values()), (
        "env_file hands every variable to a container"
    )
    for name, service in raw["services"].items():
        carried = set(environment(service)) | references_in(service)
        leaked = carried & set(SECRET_KEY_VARIABLES)
        if name == "secrets":
            assert leaked == set(SECRET_KEY_VARIABLES)
        else:
            assert leaked == set(), f"{name} gets {sorted(leaked)}"
    api_key_holders = {
        name for name, service in raw["services"].items() if "POPAGENT_API_KEY" in references_in(service)
    }
    assert api_key_holders == {"gateway"}


@pytest.mark.parametrize("source", ["example", "make-env"])
def test_connection_urls_name_the_stack_containers(
    source: str, example_env: dict[str, str], generated_env: dict[str, str], services: dict[str, Any]
) -> None:
    env = example_env if source == "example" else generated_env
    for variable, container in (("DATABASE_URL", "postgres"), ("OBSERVABILITY_DATABASE_URL", "observability-postgres")):
        url = urlsplit(env[variable])
        server = environment(services[container])
        assert url.scheme == "postgresql"
        assert (url.hostname, url.port) == (container, 5432), variable
        assert url.username == server["POSTGRES_USER"], variable
        assert url.password == env["POSTGRES_PASSWORD"], variable
        assert url.path == f"/{server['POSTGRES_DB']}", variable
    searxng = urlsplit(env["SEARXNG_URL"])
    assert searxng.hostname == "searxng"


def test_the_workspace_volume_is_mounted_where_the_runner_looks(services: dict[str, Any]) -> None:
    root = environment(services["agent-runner"])["POPAGENT_WORKSPACE_ROOT"]
    assert f"workspace:{root}" in services["agent-runner"]["volumes"]
    assert f"POPAGENT_WORKSPACE_ROOT={root}" in (DEPLOY / "Dockerfile").read_text(), (
        "the image must create it for its user"
    )


def test_the_default_workspace_is_cloned_from_this_repository(services: dict[str, Any]) -> None:
    runner = services["agent-runner"]
    source = environment(runner)["POPAGENT_DEFAULT_WORKSPACE_SOURCE"]
    assert source == "/srv/popagent-source"
    # deploy/.. is the repository root; read-only, the agents work on their clone.
    assert f"..:{source}:ro" in runner["volumes"]
    assert "workspace.checkout" in " ".join(runner["entrypoint"])


def _settings_class(name: str) -> Any:
    return importlib.import_module(f"{topology.service_named(name).module}.settings").Settings


@pytest.mark.parametrize("name", POPAGENT_SERVICES)
def test_each_container_environment_satisfies_the_service_settings(
    name: str, services: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in list(os.environ):
        if key.startswith("POPAGENT_") or key.endswith("_URL") or key.startswith("NINEROUTER_"):
            monkeypatch.delenv(key)
    for key, value in environment(services[name]).items():
        monkeypatch.setenv(key, value)
    settings = _settings_class(name)()
    if name == "gateway":
        assert (settings.host, settings.port) == ("0.0.0.0", 8080)
        assert settings.service_addresses() == {
            other: environment(services["gateway"])[address_variable(other)] for other in GRPC_SERVICES
        }
    else:
        # A misspelt *_ADDR variable would leave the default loopback address: unreachable.
        assert settings.grpc_address == environment(services[name])[address_variable(name)]
        assert settings.internal_token.startswith(f"{name}.")


def test_the_example_placeholders_are_refused_where_they_would_be_dangerous(
    raw: dict[str, Any], example_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = interpolate(raw, example_env)
    for name, variable in (("gateway", "POPAGENT_API_KEY"), ("secrets", "POPAGENT_SECRET_KEY")):
        for key in list(os.environ):
            if key.startswith("POPAGENT_") or key.endswith("_URL"):
                monkeypatch.delenv(key)
        for key, value in environment(config["services"][name]).items():
            monkeypatch.setenv(key, value)
        with pytest.raises(ValueError, match=variable):
            _settings_class(name)()


# ---- deploy/make-env.py -----------------------------------------------------------------


def test_make_env_writes_every_variable_of_the_example(
    generated_text: str, generated_env: dict[str, str], example_env: dict[str, str]
) -> None:
    assert list(generated_env) == list(example_env)
    assert not generated_text.startswith("# Every variable"), "the template's own header is replaced"


def test_make_env_secrets_are_fresh_and_well_formed(
    generated_env: dict[str, str], example_env: dict[str, str], tmp_path: Path
) -> None:
    key = base64.b64decode(generated_env["POPAGENT_SECRET_KEY"], validate=True)
    assert len(key) == 32
    assert len(generated_env["POPAGENT_API_KEY"]) >= 16
    second = parse_env_file(run_make_env(tmp_path))
    generated = [
        "POSTGRES_PASSWORD",
        "POPAGENT_API_KEY",
        "POPAGENT_SECRET_KEY",
        "SEARXNG_SECRET",
        *(token_variable(name) for name in POPAGENT_SERVICES),
        *(callers_variable(name) for name in GRPC_SERVICES),
        *(nats_password_variable(name) for name in POPAGENT_SERVICES),
    ]
    for variable in generated:
        assert generated_env[variable] != second[variable], f"{variable} is not random"
        assert generated_env[variable] != example_env[variable], f"{variable} kept the placeholder"
    for variable in set(generated_env) - {*generated, "DATABASE_URL", "OBSERVABILITY_DATABASE_URL"}:
        assert generated_env[variable] == example_env[variable], f"{variable} should keep the template's value"


def test_make_env_values_read_the_same_in_every_env_file_parser(generated_env: dict[str, str]) -> None:
    for variable, value in generated_env.items():
        # Unquoted values: compose would expand "$", cut at " #" and strip surrounding quotes or blanks.
        assert "$" not in value and "#" not in value, variable
        assert value == value.strip() and " " not in value, variable
        assert not value.startswith(("'", '"')), variable


def test_make_env_credentials_authenticate_each_caller_where_it_calls(generated_env: dict[str, str]) -> None:
    for name in GRPC_SERVICES:
        registry = CallerRegistry.from_json(generated_env[callers_variable(name)])
        for caller in topology.CALLERS[name]:
            assert registry.authenticate(generated_env[token_variable(caller)]) == caller


def test_deploy_env_is_ignored_by_git() -> None:
    if not (REPO_ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    result = subprocess.run(
        ["git", "check-ignore", "-q", "deploy/.env"], cwd=REPO_ROOT, capture_output=True, timeout=30, check=False
    )
    assert result.returncode == 0, "deploy/.env would be committed"
    example = subprocess.run(
        ["git", "check-ignore", "-q", "deploy/.env.example"],
        cwd=REPO_ROOT,
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert example.returncode == 1


# ---- the health probes compose runs inside the containers -------------------------------


def _probe(raw: dict[str, Any], service: str) -> list[str]:
    test = raw["services"][service]["healthcheck"]["test"]
    assert test[:3] == ["CMD", "python", "-c"]
    return test[3:]


def _run_probe(script: str, argument: str, env: dict[str, str] | None = None) -> int:
    result = subprocess.run(
        [sys.executable, "-c", script, argument], capture_output=True, timeout=30, env=env, check=False
    )
    return result.returncode


def test_the_grpc_probe_passes_only_while_the_service_is_serving(raw: dict[str, Any]) -> None:
    script, target = _probe(raw, "hooks")
    assert target.startswith("127.0.0.1:")
    for name in GRPC_SERVICES:
        assert _probe(raw, name)[0] == script
    port = free_port()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    try:
        servicer.set("", health_pb2.HealthCheckResponse.SERVING)
        assert _run_probe(script, f"127.0.0.1:{port}") == 0
        servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
        assert _run_probe(script, f"127.0.0.1:{port}") == 1
    finally:
        server.stop(grace=None).wait()
    assert _run_probe(script, f"127.0.0.1:{port}") != 0


class _Health(BaseHTTPRequestHandler):
    status = 200
    key = "k" * 24

    def do_GET(self) -> None:
        ok_key = self.headers.get("x-popagent-key") == self.key and self.path == "/api/health"
        self.send_response(self.status if ok_key else 401)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_the_gateway_probe_sends_the_api_key_and_needs_a_200(raw: dict[str, Any]) -> None:
    script, url = _probe(raw, "gateway")
    assert urlsplit(url).path == "/api/health"
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    target = f"http://127.0.0.1:{server.server_address[1]}/api/health"
    base = {"PATH": os.environ.get("PATH", "")}
    try:
        assert _run_probe(script, target, {**base, "POPAGENT_API_KEY": _Health.key}) == 0
        assert _run_probe(script, target, {**base, "POPAGENT_API_KEY": "wrong-key-wrong-key"}) != 0
        _Health.status = 503
        assert _run_probe(script, target, {**base, "POPAGENT_API_KEY": _Health.key}) != 0
    finally:
        _Health.status = 200
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_the_tasks_container_runs_attempts_in_agent_runner_as_make_run_does(services: dict[str, Any]) -> None:
    """Without an executor a tasks process takes and schedules tasks but runs none of them."""
    executor = environment(services["tasks"])["POPAGENT_TASKS_EXECUTOR"]
    launcher = (REPO_ROOT / "libs/popagent-dev/src/popagent_dev/launcher.py").read_text()
    assert f'"{executor}"' in launcher
    module, _, attribute = executor.partition(":")
    assert callable(getattr(importlib.import_module(module), attribute))
