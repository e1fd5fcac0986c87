"""Settings base: pydantic-settings classes built at start, never at import.

A bad or missing value stops the process with one line naming the variable and what is
wrong (`load_settings`); the value itself is never echoed, since it may be a secret.
"""

from __future__ import annotations

import ipaddress
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, AliasChoices, Field, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from popagent_core.auth import CallerRegistry
from popagent_core.errors import ConfigurationError
from popagent_core.topology import service_named

_DSN_SCHEMES = ("postgresql://", "postgres://")


def check_postgres_dsn(value: str) -> str:
    """A field validator's check of a PostgreSQL connection URL."""
    if not value.startswith(_DSN_SCHEMES):
        raise ValueError("must be a postgresql:// URL")
    return value


def check_nats_urls(value: str) -> str:
    """A field validator's check of a NATS server list: one or more comma-separated nats:// (or tls://) URLs."""
    if not all(part.strip().startswith(("nats://", "tls://")) for part in value.split(",")):
        raise ValueError("must be one or more comma-separated nats:// URLs")
    return value


def unless_empty(check: Callable[[str], str]) -> Callable[[str], str]:
    """`check` for a setting whose empty value means "none": the empty string passes unchecked."""

    def check_if_set(value: str) -> str:
        return check(value) if value else value

    return check_if_set


def check_above(field: str, lower: str, message: str, *, factor: float = 1.0, or_equal: bool = False) -> Any:
    """A field validator for a class body: `field` must exceed `factor` times `lower` (or equal it, with
    `or_equal`), else `message`. `lower` is declared before `field`; when its own value was invalid it is
    not checked against."""

    def check(cls: type[BaseSettings], value: float, info: ValidationInfo) -> float:
        bound = info.data.get(lower)
        if bound is not None and (value < factor * bound if or_equal else value <= factor * bound):
            raise ValueError(message)
        return value

    return field_validator(field)(classmethod(check))


# Settings fields checked by their type, so a subclass that declares the field again keeps the check.
PostgresUrl = Annotated[str, AfterValidator(check_postgres_dsn)]
PostgresUrlOrNone = Annotated[str, AfterValidator(unless_empty(check_postgres_dsn))]
NatsUrls = Annotated[str, AfterValidator(check_nats_urls)]
NatsUrlsOrNone = Annotated[str, AfterValidator(unless_empty(check_nats_urls))]


@dataclass(frozen=True, slots=True)
class Retention:
    """How long the observability store keeps rows, and how many per table at most."""

    days: int = 14
    max_rows: int = 1_000_000


class ProcessSettings(BaseSettings):
    """What every popagent process reads, the gateway included. Subclasses add their own fields."""

    model_config = SettingsConfigDict(env_ignore_empty=True, extra="ignore", frozen=True, populate_by_name=True)

    database_url: PostgresUrl = Field(validation_alias="DATABASE_URL")
    # The observability store every process exports its spans to (popagent_core.span_store); unset: none.
    observability_database_url: PostgresUrlOrNone = Field(default="", validation_alias="OBSERVABILITY_DATABASE_URL")
    # Comma-separated logger name prefixes whose info lines are stored too (warnings and errors always are).
    observability_info_loggers: str = Field(default="", validation_alias="POPAGENT_OBSERVABILITY_INFO_LOGGERS")
    # Retention of the observability store, enforced by every writer after its writes and once a day:
    # spans, logs and feedback older than this many days go, and the newest rows are kept up to the cap.
    observability_retention_days: int = Field(
        default=14, ge=1, le=3650, validation_alias="POPAGENT_OBSERVABILITY_RETENTION_DAYS"
    )
    # Per table (spans, logs).
    observability_max_rows: int = Field(
        default=1_000_000, ge=100, le=1_000_000_000, validation_alias="POPAGENT_OBSERVABILITY_MAX_ROWS"
    )
    log_level: str = Field(default="INFO", validation_alias="POPAGENT_LOG_LEVEL")
    # On how many servers of a NATS cluster each JetStream stream this process creates is stored
    # (its own facts' stream; agent-runner's turn log too): 3 on a cluster of 3 keeps every stream
    # through the loss of one server. A single server stores only 1 (it refuses more).
    nats_stream_replicas: int = Field(default=1, ge=1, le=5, validation_alias="POPAGENT_NATS_STREAM_REPLICAS")
    # This process's own credential for calling other services (internal gRPC auth).
    internal_token: str = Field(default="", validation_alias="POPAGENT_INTERNAL_TOKEN", repr=False)

    @property
    def observability_retention(self) -> Retention:
        return Retention(days=self.observability_retention_days, max_rows=self.observability_max_rows)

    @property
    def stored_info_loggers(self) -> tuple[str, ...]:
        return tuple(name.strip() for name in self.observability_info_loggers.split(",") if name.strip())

    @field_validator("log_level")
    @classmethod
    def _log_level(cls, value: str) -> str:
        level = value.upper()
        if level not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
            raise ValueError("must be one of DEBUG, INFO, WARNING, ERROR")
        return level


class ServiceSettings(ProcessSettings):
    """What every gRPC service needs on top: the NATS bus and who may call its RPCs."""

    # May carry this service's NATS user and password (`nats://user:password@host:port`, as `make run`
    # and compose give it): kept out of the settings' repr, and its value out of logs and spans.
    nats_url: NatsUrls = Field(default="nats://127.0.0.1:4222", validation_alias="NATS_URL", repr=False)
    # JSON {"caller": "sha256 hex of its token"}: who may call this service's RPCs.
    internal_callers: str = Field(validation_alias="POPAGENT_INTERNAL_CALLERS")

    @field_validator("internal_callers")
    @classmethod
    def _internal_callers(cls, value: str) -> str:
        try:
            CallerRegistry.from_json(value)
        except ConfigurationError as exc:
            raise ValueError(str(exc).removeprefix("POPAGENT_INTERNAL_CALLERS ")) from None
        return value


def grpc_address_field(service: str) -> Any:
    """The listen/dial address of one service: `POPAGENT_<SERVICE>_ADDR`, host:port or unix:path.

    Unset, it is the service's default loopback port (popagent_core.topology); the launcher
    passes explicit addresses to every process. A client of agent-runner may be given its
    workers as a comma-separated list of IPv4:port (`check_dial_addresses`); a service
    listens on one address (`check_listen_address`).
    """
    spec = service_named(service)
    if spec.grpc_port is None:
        raise ValueError(f"{service} serves no gRPC")
    return Field(default=f"127.0.0.1:{spec.grpc_port}", validation_alias=AliasChoices(spec.address_variable))


def describe_validation_error(settings_cls: type[BaseSettings], error: ValidationError) -> str:
    """One line naming each bad variable and what is wrong, never its value."""
    problems = []
    for item in error.errors(include_input=False, include_url=False):
        field_name = str(item["loc"][0]) if item["loc"] else "?"
        field = settings_cls.model_fields.get(field_name)
        variable = field_name.upper()
        if field is not None and field.validation_alias is not None:
            alias = field.validation_alias
            if isinstance(alias, AliasChoices):
                alias = alias.choices[0]
            variable = str(alias)
        reason = "is required but not set" if item["type"] == "missing" else item["msg"]
        reason = reason.removeprefix("Value error, ")
        problems.append(f"{variable} {reason}")
    return "; ".join(problems)


S = TypeVar("S", bound=BaseSettings)


def load_settings(settings_cls: type[S], service: str, **overrides: Any) -> S:
    """Build settings from the environment, or exit 2 with one line naming what is wrong."""
    try:
        return settings_cls(**overrides)
    except ValidationError as error:
        sys.stderr.write(f"popagent-{service}: bad configuration: {describe_validation_error(settings_cls, error)}\n")
        raise SystemExit(2) from None


def split_addresses(value: str) -> list[str]:
    """The addresses of a `POPAGENT_<SERVICE>_ADDR` value: one address, or several IP:port separated by commas.

    Several are the worker processes of one service (agent-runner); raises ValueError naming a bad entry.
    """
    addresses = [entry.strip() for entry in value.split(",")]
    if any(not entry for entry in addresses):
        raise ValueError("an address list must not have empty entries")
    if len(addresses) > 1:
        for entry in addresses:
            host, _, port = entry.rpartition(":")
            try:
                ipaddress.IPv4Address(host)
            except ValueError:
                raise ValueError(f"a list of addresses takes IPv4:port entries only, got {entry!r}") from None
            if not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"bad port in {entry!r}")
    return addresses


def check_dial_addresses(value: str) -> str:
    """A field validator's check of an address a client dials: one address or a list of workers."""
    split_addresses(value)
    return value


def check_listen_address(value: str) -> str:
    """A field validator's check of the address a service listens on: exactly one."""
    if "," in value:
        raise ValueError("a service listens on one address; only its clients take a list of workers")
    return value


# The address of a service a client dials: one, or agent-runner's workers as a list (`split_addresses`).
DialAddresses = Annotated[str, AfterValidator(check_dial_addresses)]
DialAddressesOrNone = Annotated[str, AfterValidator(unless_empty(check_dial_addresses))]
