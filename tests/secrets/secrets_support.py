"""Helpers shared by the secrets tests (imported by name: pytest puts this folder on sys.path)."""

from __future__ import annotations

import base64
import os
from typing import Protocol

from popagent.secrets.v1 import secrets_pb2, secrets_pb2_grpc


def new_key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


class HasStub(Protocol):
    def stub(self, caller: str | None): ...  # type: ignore[no-untyped-def]


async def put(
    stub: secrets_pb2_grpc.SecretsServiceStub, resource_id: str, name: str, value: str
) -> secrets_pb2.SecretInfo:
    return await stub.PutSecret(secrets_pb2.PutSecretRequest(resource_id=resource_id, name=name, value=value))


async def resolve(service: HasStub, resource_id: str, name: str, origin: str) -> str:
    """ResolveSecret as browser-bridge, the only caller allowed plaintext."""
    async with service.stub("browser-bridge") as bridge:
        response = await bridge.ResolveSecret(
            secrets_pb2.ResolveSecretRequest(resource_id=resource_id, name=name, origin=origin)
        )
    return response.value
