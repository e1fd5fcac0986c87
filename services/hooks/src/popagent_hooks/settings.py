"""Settings of the hooks service, built at start.

`POPAGENT_HOOKS` is parsed and checked here, so a bad document stops the process at
start (exit 2) with one line naming the JSON path; the service never runs with a
configuration it only half understands.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from popagent_core.settings import ServiceSettings, grpc_address_field
from popagent_hooks.config import HooksConfig, HooksConfigError, parse_allowed_hosts, parse_hooks_config


class Settings(ServiceSettings):
    model_config = SettingsConfigDict(arbitrary_types_allowed=True)

    grpc_address: str = grpc_address_field("hooks")
    # Declared before `hooks`: the hooks validator reads it.
    allowed_hosts: Annotated[frozenset[str], NoDecode] = Field(
        default=frozenset(), validation_alias="POPAGENT_HOOK_ALLOWED_HOSTS"
    )
    # Loopback, private, link-local and CGNAT targets are refused at connect time unless
    # the operator allows them (local receivers in tests and single-host setups).
    allow_private_addresses: bool = Field(default=False, validation_alias="POPAGENT_HOOK_ALLOW_PRIVATE_ADDRESSES")
    # Extra CA bundle (PEM) trusted for hook endpoints, on top of the public roots.
    ca_file: Path | None = Field(default=None, validation_alias="POPAGENT_HOOK_CA_FILE")
    hooks: Annotated[HooksConfig, NoDecode] = Field(
        default_factory=HooksConfig.empty, validation_alias="POPAGENT_HOOKS"
    )

    @field_validator("allowed_hosts", mode="before")
    @classmethod
    def _allowed_hosts(cls, value: object) -> frozenset[str]:
        if isinstance(value, str):
            return parse_allowed_hosts(value)
        if isinstance(value, (set, frozenset, list, tuple)):
            return parse_allowed_hosts(",".join(str(item) for item in value))
        raise ValueError("must be a comma-separated list of hostnames")

    @field_validator("ca_file")
    @classmethod
    def _ca_file(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_file():
            raise ValueError("must name a readable PEM file")
        return value

    @field_validator("hooks", mode="before")
    @classmethod
    def _hooks(cls, value: object, info: ValidationInfo) -> HooksConfig:
        if isinstance(value, HooksConfig):
            return value
        if not isinstance(value, str):
            raise ValueError("must be a JSON document")
        if not value.strip():
            return HooksConfig.empty()
        allowed = info.data.get("allowed_hosts")
        if allowed is None:
            raise ValueError("cannot be checked until POPAGENT_HOOK_ALLOWED_HOSTS is valid")
        try:
            return parse_hooks_config(value, allowed)
        except HooksConfigError as exc:
            raise ValueError(str(exc)) from None
