"""Bad configuration stops a service at start with one line naming the variable, never its value."""

from __future__ import annotations

import asyncio
import sys

import pytest
from pydantic import AliasChoices, Field, ValidationError

from popagent_core.settings import ServiceSettings, describe_validation_error, load_settings
from popagent_evolution.settings import Settings
from support.waiting import TEST_WITH_A_START_S, exited

from .helpers import REPO_ROOT, VALID_CALLERS, VALID_DSN, service_env


async def run_evolution(env: dict[str, str]) -> tuple[int, list[str]]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "popagent_evolution",
        env=service_env(**{"POPAGENT_INTERNAL_CALLERS": VALID_CALLERS, **env}),
        cwd=REPO_ROOT,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await exited(process, what="popagent_evolution with a bad setting")
    assert process.returncode is not None
    return process.returncode, stderr.decode().splitlines()


@pytest.mark.timeout(TEST_WITH_A_START_S)
@pytest.mark.parametrize(
    ("env", "variable", "secret_value"),
    [
        pytest.param({}, "DATABASE_URL", None, id="database-url-missing"),
        pytest.param(
            {"DATABASE_URL": "mysql://admin:hunter2@db/x"}, "DATABASE_URL", "hunter2", id="database-url-mysql"
        ),
        pytest.param(
            {"DATABASE_URL": VALID_DSN, "NATS_URL": "http://nats-host:4222"},
            "NATS_URL",
            "nats-host",
            id="nats-url-http",
        ),
        pytest.param(
            {"DATABASE_URL": VALID_DSN, "POPAGENT_LOG_LEVEL": "LOUD"}, "POPAGENT_LOG_LEVEL", "LOUD", id="log-level"
        ),
    ],
)
async def test_a_bad_setting_exits_2_with_one_line_naming_the_variable(env, variable, secret_value):
    returncode, lines = await run_evolution(env)

    assert returncode == 2
    assert len(lines) == 1, lines
    assert lines[0].startswith("popagent-evolution: bad configuration: ")
    assert variable in lines[0]
    if secret_value is not None:
        assert secret_value not in lines[0]


@pytest.mark.timeout(TEST_WITH_A_START_S)
@pytest.mark.parametrize(
    ("env", "line"),
    [
        pytest.param(
            {"DATABASE_URL": "mysql://admin:hunter2@db/x"},
            "DATABASE_URL must be a postgresql:// URL",
            id="database-url",
        ),
        pytest.param(
            {"OBSERVABILITY_DATABASE_URL": "mysql://admin:hunter2@db/x"},
            "OBSERVABILITY_DATABASE_URL must be a postgresql:// URL",
            id="observability-url",
        ),
        pytest.param(
            {"POPAGENT_LOG_LEVEL": "LOUD"},
            "POPAGENT_LOG_LEVEL must be one of DEBUG, INFO, WARNING, ERROR",
            id="log-level",
        ),
    ],
)
async def test_the_gateway_checks_its_stores_and_log_level_as_every_service_does(env, line):
    """The gateway's settings build on the kernel's base: the same checks, the same one line."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "popagent_gateway",
        env=service_env(**{"DATABASE_URL": VALID_DSN, "OBSERVABILITY_DATABASE_URL": VALID_DSN, **env}),
        cwd=REPO_ROOT,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await exited(process, what="popagent_gateway with a bad setting")

    assert process.returncode == 2
    assert stderr.decode().splitlines() == [f"popagent-gateway: bad configuration: {line}"]


@pytest.mark.timeout(TEST_WITH_A_START_S)
@pytest.mark.parametrize(
    ("callers", "secret_value"),
    [
        pytest.param(None, None, id="missing"),
        pytest.param('{"gateway": "not-a-digest-leaky"}', "leaky", id="not-digests"),
        pytest.param("{not json leaky", "leaky", id="not-json"),
    ],
)
async def test_bad_internal_callers_exit_2_with_one_line_naming_the_variable(callers, secret_value):
    # POPAGENT_INTERNAL_CALLERS is a setting like any other: checked when settings are
    # loaded, not later inside the service where it surfaces as a start-up traceback.
    env = {"DATABASE_URL": VALID_DSN, "NATS_URL": "nats://127.0.0.1:1", "POPAGENT_INTERNAL_CALLERS": callers or ""}

    returncode, lines = await run_evolution(env)

    assert returncode == 2, lines
    assert len(lines) == 1, lines
    assert "POPAGENT_INTERNAL_CALLERS" in lines[0]
    if secret_value is not None:
        assert secret_value not in lines[0]


def settings_error(settings_cls: type[ServiceSettings], monkeypatch: pytest.MonkeyPatch, **env: str) -> ValidationError:
    monkeypatch.setenv("POPAGENT_INTERNAL_CALLERS", VALID_CALLERS)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ValidationError) as caught:
        settings_cls()  # pyright: ignore[reportCallIssue] - values come from the environment
    return caught.value


def test_describe_validation_error_names_every_bad_variable_by_its_env_name(monkeypatch):
    error = settings_error(
        Settings, monkeypatch, DATABASE_URL="mysql://root:s3cret@db/x", POPAGENT_LOG_LEVEL="LOUD", NATS_URL="http://n"
    )

    line = describe_validation_error(Settings, error)

    assert line == (
        "DATABASE_URL must be a postgresql:// URL; "
        "POPAGENT_LOG_LEVEL must be one of DEBUG, INFO, WARNING, ERROR; "
        "NATS_URL must be one or more comma-separated nats:// URLs"
    )
    assert "s3cret" not in line and "LOUD" not in line


def test_describe_validation_error_reports_a_missing_variable(monkeypatch):
    monkeypatch.delenv("DATABASE_URL", raising=False)

    line = describe_validation_error(Settings, settings_error(Settings, monkeypatch))

    assert line == "DATABASE_URL is required but not set"


class _PortSettings(ServiceSettings):
    port: int = Field(default=1, validation_alias=AliasChoices("POPAGENT_TEST_ONLY_PORT", "TEST_ONLY_PORT"))


def test_describe_validation_error_uses_the_first_alias_and_never_the_value(monkeypatch):
    error = settings_error(_PortSettings, monkeypatch, DATABASE_URL=VALID_DSN, POPAGENT_TEST_ONLY_PORT="port-9xyz")

    line = describe_validation_error(_PortSettings, error)

    assert line.startswith("POPAGENT_TEST_ONLY_PORT ")
    assert "9xyz" not in line


def test_load_settings_exits_2_and_writes_one_line(monkeypatch, capsys):
    monkeypatch.setenv("POPAGENT_INTERNAL_CALLERS", VALID_CALLERS)
    monkeypatch.setenv("DATABASE_URL", "sqlite:///tmp/x")

    with pytest.raises(SystemExit) as caught:
        load_settings(Settings, "evolution")

    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert err == "popagent-evolution: bad configuration: DATABASE_URL must be a postgresql:// URL\n"


def test_settings_normalise_the_log_level_and_read_the_service_address(monkeypatch):
    monkeypatch.setenv("POPAGENT_INTERNAL_CALLERS", VALID_CALLERS)
    monkeypatch.setenv("DATABASE_URL", VALID_DSN)
    monkeypatch.setenv("POPAGENT_LOG_LEVEL", "debug")
    monkeypatch.setenv("POPAGENT_EVOLUTION_ADDR", "unix:/tmp/evolution.sock")
    monkeypatch.setenv("NATS_URL", "nats://a:4222, tls://b:4222")

    settings = Settings()  # pyright: ignore[reportCallIssue] - values come from the environment

    assert settings.log_level == "DEBUG"
    assert settings.grpc_address == "unix:/tmp/evolution.sock"
    assert settings.nats_url == "nats://a:4222, tls://b:4222"


def test_settings_passed_by_field_name_are_honoured_not_silently_dropped():
    # load_settings(**overrides) and tests build settings in code; a field name that is
    # quietly ignored would leave, say, the service on its default port.
    settings = Settings(
        database_url=VALID_DSN,
        internal_callers=VALID_CALLERS,
        grpc_address="127.0.0.1:1",
        log_level="ERROR",
    )

    assert settings.grpc_address == "127.0.0.1:1"
    assert settings.log_level == "ERROR"
