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

ResourceId = Annotated[str, Field(min_length=1, max_length=MAX_ID_CHARS)]
SecretName = Annotated[str, Field(min_length=1, max_length=MAX_ID_CHARS)]
Origin = Annotated[str, Field(min_length=1, max_length=MAX_ORIGIN_CHARS)]


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

    origin: Origin


class SecretListQuery(BaseModel):
    """Query of GET /api/secrets: optionally one resource; any other parameter is refused."""

    model_config = ConfigDict(extra="forbid")

    resource_id: str = Field(default="", alias="resourceId", max_length=MAX_ID_CHARS, description="only this resource")


class OriginQuery(BaseModel):
    """Query of DELETE .../origins: the exact origin to unbind; any other parameter is refused."""

    model_config = ConfigDict(extra="forbid")

    origin: Origin
