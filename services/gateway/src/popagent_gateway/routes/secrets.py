"""/api/secrets, backed by the secrets service (docs/security.md says what it holds and who reads it).

`POST /api/secrets` provisions a secret or rotates the value of the one with the same
resource and name; `DELETE /api/secrets/{id}` deletes it with its origin bindings. Values
are write-only: they go in with POST and never come back out of any route. Errors from
the service map through the gateway's one gRPC status table.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response

from popagent.secrets.v1 import secrets_pb2
from popagent_gateway.deps import SecretsStub
from popagent_gateway.dto.secrets import (
    MAX_ID_CHARS,
    RESOURCE_ID_PATTERN,
    SECRET_ID_PATTERN,
    SECRET_NAME_PATTERN,
    OriginBind,
    OriginQuery,
    SecretListOut,
    SecretListQuery,
    SecretOut,
    SecretProvision,
)
from popagent_gateway.wire import from_message

router = APIRouter(prefix="/secrets", tags=["secrets"])

SecretId = Annotated[str, Path(min_length=36, max_length=36, pattern=SECRET_ID_PATTERN, description="a UUID")]
ResourceIdPath = Annotated[str, Path(min_length=1, max_length=MAX_ID_CHARS, pattern=RESOURCE_ID_PATTERN)]
SecretNamePath = Annotated[str, Path(min_length=1, max_length=MAX_ID_CHARS, pattern=SECRET_NAME_PATTERN)]


@router.get("", response_model=SecretListOut)
async def list_secrets(stub: SecretsStub, query: Annotated[SecretListQuery, Query()]) -> SecretListOut:
    """List secrets (ids, names, bound origins, timestamps); never values or ciphertext."""
    response = await stub.ListSecrets(secrets_pb2.ListSecretsRequest(resource_id=query.resource_id))
    return SecretListOut(secrets=[from_message(SecretOut, info) for info in response.secrets])


@router.post(
    "",
    response_model=SecretOut,
    status_code=201,
    responses={200: {"model": SecretOut, "description": "rotated: the secret existed, its value was replaced"}},
)
async def provision_secret(body: SecretProvision, stub: SecretsStub, response: Response) -> SecretOut:
    """Provision a secret (201), or rotate the value of the one with this resource and name (200).

    A rotation keeps the secret's id and origin bindings. The value is never returned.
    """
    stored = await stub.PutSecret(
        secrets_pb2.PutSecretRequest(resource_id=body.resource_id, name=body.name, value=body.value)
    )
    if not stored.created:
        response.status_code = 200
    return from_message(SecretOut, stored.secret)


@router.delete("/{secret_id}", status_code=204, response_class=Response)
async def delete_secret(secret_id: SecretId, stub: SecretsStub) -> Response:
    """Delete a secret and every origin binding of it."""
    await stub.DeleteSecret(secrets_pb2.DeleteSecretRequest(id=secret_id))
    return Response(status_code=204)


@router.post("/{resource_id}/{name}/origins", response_model=SecretOut)
async def bind_origin(
    resource_id: ResourceIdPath, name: SecretNamePath, body: OriginBind, stub: SecretsStub
) -> SecretOut:
    """Bind the secret to one exact https origin (idempotent)."""
    info = await stub.BindOrigin(secrets_pb2.BindOriginRequest(resource_id=resource_id, name=name, origin=body.origin))
    return from_message(SecretOut, info)


@router.delete("/{resource_id}/{name}/origins", response_model=SecretOut)
async def unbind_origin(
    resource_id: ResourceIdPath,
    name: SecretNamePath,
    query: Annotated[OriginQuery, Query()],
    stub: SecretsStub,
) -> SecretOut:
    """Remove one origin binding."""
    info = await stub.UnbindOrigin(
        secrets_pb2.UnbindOriginRequest(resource_id=resource_id, name=name, origin=query.origin)
    )
    return from_message(SecretOut, info)
