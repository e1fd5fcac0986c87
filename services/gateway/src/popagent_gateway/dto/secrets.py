"""Application-managed secrets: provision-or-rotate, list, delete, origin bindings.

Values are write-only: a request body may carry one, no response shape has a field for it.
The service checks the exact bounds (value <= 8 KiB of UTF-8, name charset); the bounds
here keep absurd inputs from ever reaching it.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from popagent_gateway.dto import WireInput, WireModel

MAX_VALUE_CHARS = 8 * 1024
MAX_ID_CHARS = 128
MAX_ORIGIN_CHARS = 300

# The secrets service's own rules (popagent_secrets.models), declared so clients know them.
RESOURCE_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"
SECRET_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
SECRET_ID_PATTERN = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
# An exact https origin as a browser reports `location.origin` (the service lowercases the host):
# LDH labels, the last one starting with a letter, or a canonical IPv4 address; an optional
# port 1-65535; a host of at most 253 characters. No label has `--` at positions 3-4 (IDNA
# keeps that for A-labels), so internationalized hosts and IPv6 literals, which the secrets
# service would normalize, are not bindable through the API: the document declares exactly
# what the gateway lets through, and a pattern cannot say which xn-- labels decode.
_LABEL = r"(?!..--)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_TOP_LABEL = r"(?!..--)[A-Za-z](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
_PORT = r"(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
# The host and optional port of an origin, after its scheme.
HOST_PORT_PATTERN = rf"(?=[^:]{{1,253}}(?::|$))(?:(?:{_LABEL}\.)*{_TOP_LABEL}|{_OCTET}(?:\.{_OCTET}){{3}})(?::{_PORT})?"
ORIGIN_PATTERN = rf"^https://{HOST_PORT_PATTERN}$"
ORIGIN_DESCRIPTION = "an exact https origin, https://host[:port], e.g. https://example.com"

ResourceId = Annotated[str, Field(min_length=1, max_length=MAX_ID_CHARS, pattern=RESOURCE_ID_PATTERN)]
SecretName = Annotated[str, Field(min_length=1, max_length=MAX_ID_CHARS, pattern=SECRET_NAME_PATTERN)]
Origin = Annotated[
    str,
    Field(min_length=1, max_length=MAX_ORIGIN_CHARS, pattern=ORIGIN_PATTERN, description=ORIGIN_DESCRIPTION),
]
# The origin pattern's lookaheads need Python's engine (pydantic's default, Rust's, has none);
# every model with an Origin says so.
ORIGIN_REGEX = ConfigDict(regex_engine="python-re")


class SecretOut(WireModel):
    id: str = Field(description="stable for the secret's lifetime: rotation keeps it")
    resource_id: str
    name: str
    origins: list[str] = Field(description="the exact https origins the value may be filled into")
    created_at: str
    updated_at: str = Field(description="when the value last changed (provisioned or rotated)")


class SecretListOut(WireModel):
    secrets: list[SecretOut]


class SecretProvision(WireInput):
    """POST body: provision a secret, or rotate the value of the one with this resource and name."""

    # A refused value is never echoed back, not even in a validation error.
    model_config = ConfigDict(hide_input_in_errors=True)

    resource_id: ResourceId = Field(description="the scope the secret belongs to, e.g. popagent-user")
    name: SecretName = Field(description="matched exactly (case-sensitive)")
    value: str = Field(min_length=1, max_length=MAX_VALUE_CHARS, description="write-only: never returned")


class OriginBind(WireInput):
    """POST body: one exact https origin (scheme + host + port)."""

    model_config = ORIGIN_REGEX

    origin: Origin


class SecretListQuery(BaseModel):
    """Query of GET /api/secrets: optionally one resource; any other parameter is refused."""

    model_config = ConfigDict(extra="forbid")

    resource_id: str = Field(
        default="",
        alias="resourceId",
        max_length=MAX_ID_CHARS,
        pattern=f"^$|{RESOURCE_ID_PATTERN}",
        description="only this resource",
    )


class OriginQuery(BaseModel):
    """Query of DELETE .../origins: the exact origin to unbind; any other parameter is refused."""

    model_config = ConfigDict(extra="forbid", regex_engine="python-re")

    origin: Origin
