"""/api routes backed by the secrets service.

Values are write-only: they go in with PUT and never come back out of any route. Lists
and every other response carry names, bindings and timestamps only. Errors from the
service map through the gateway's one gRPC status table.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response
from pydantic import BaseModel, ConfigDict, Field

from popagent.secrets.v1 import secrets_pb2
from popagent_gateway.deps import SecretsStub

router = APIRouter(prefix="/secrets", tags=["secrets"])

RPC_TIMEOUT_S = 10.0
# The service checks the exact bounds (value <= 8 KiB of UTF-8, name charset); these
# keep absurd inputs from ever reaching it.
MAX_VALUE_CHARS = 8 * 1024
MAX_ID_CHARS = 128
MAX_ORIGIN_CHARS = 300

ResourceId = Annotated[str, Path(min_length=1, max_length=MAX_ID_CHARS)]
SecretName = Annotated[str, Path(min_length=1, max_length=MAX_ID_CHARS)]


class SecretValueBody(BaseModel):
    """PUT body: the new value (provision or rotate)."""

    model_config = ConfigDict(strict=True, extra="forbid", hide_input_in_errors=True)

    value: str = Field(min_length=1, max_length=MAX_VALUE_CHARS)


class OriginBody(BaseModel):
    """POST body: one exact https origin (scheme + host + port)."""

    model_config = ConfigDict(strict=True, extra="forbid")

    origin: str = Field(min_length=1, max_length=MAX_ORIGIN_CHARS)


class SecretListQuery(BaseModel):
    """GET query: optionally one resource; any other parameter is refused."""

    model_config = ConfigDict(extra="forbid")

    resourceId: str = Field(default="", max_length=MAX_ID_CHARS)


class OriginQuery(BaseModel):
    """DELETE query: the exact origin to unbind; any other parameter is refused."""

    model_config = ConfigDict(extra="forbid")

    origin: str = Field(min_length=1, max_length=MAX_ORIGIN_CHARS)


class SecretOut(BaseModel):
    resourceId: str
    name: str
    origins: list[str]
    createdAt: str
    updatedAt: str


class SecretListOut(BaseModel):
    secrets: list[SecretOut]


def _out(info: secrets_pb2.SecretInfo) -> SecretOut:
    return SecretOut(
        resourceId=info.resource_id,
        name=info.name,
        origins=list(info.origins),
        createdAt=info.created_at,
        updatedAt=info.updated_at,
    )


@router.get("", response_model=SecretListOut)
async def list_secrets(stub: SecretsStub, query: Annotated[SecretListQuery, Query()]) -> SecretListOut:
    """List secrets (names, bound origins, timestamps); never values or ciphertext."""
    response = await stub.ListSecrets(
        secrets_pb2.ListSecretsRequest(resource_id=query.resourceId), timeout=RPC_TIMEOUT_S
    )
    return SecretListOut(secrets=[_out(info) for info in response.secrets])


@router.put("/{resource_id}/{name}", response_model=SecretOut)
async def put_secret(resource_id: ResourceId, name: SecretName, body: SecretValueBody, stub: SecretsStub) -> SecretOut:
    """Provision a secret or rotate (replace) its value. The value is never returned."""
    info = await stub.PutSecret(
        secrets_pb2.PutSecretRequest(resource_id=resource_id, name=name, value=body.value), timeout=RPC_TIMEOUT_S
    )
    return _out(info)


@router.delete("/{resource_id}/{name}", status_code=204)
async def delete_secret(resource_id: ResourceId, name: SecretName, stub: SecretsStub) -> Response:
    """Delete a secret and its origin bindings."""
    await stub.DeleteSecret(secrets_pb2.DeleteSecretRequest(resource_id=resource_id, name=name), timeout=RPC_TIMEOUT_S)
    return Response(status_code=204)


@router.post("/{resource_id}/{name}/origins", response_model=SecretOut)
async def bind_origin(resource_id: ResourceId, name: SecretName, body: OriginBody, stub: SecretsStub) -> SecretOut:
    """Bind the secret to one exact https origin (idempotent)."""
    info = await stub.BindOrigin(
        secrets_pb2.BindOriginRequest(resource_id=resource_id, name=name, origin=body.origin), timeout=RPC_TIMEOUT_S
    )
    return _out(info)


@router.delete("/{resource_id}/{name}/origins", response_model=SecretOut)
async def unbind_origin(
    resource_id: ResourceId,
    name: SecretName,
    query: Annotated[OriginQuery, Query()],
    stub: SecretsStub,
) -> SecretOut:
    """Remove one origin binding."""
    origin = query.origin
    info = await stub.UnbindOrigin(
        secrets_pb2.UnbindOriginRequest(resource_id=resource_id, name=name, origin=origin), timeout=RPC_TIMEOUT_S
    )
    return _out(info)
