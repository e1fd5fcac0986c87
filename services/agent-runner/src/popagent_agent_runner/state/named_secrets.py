"""Values agent-runner keeps in the secrets service, by name under one resource: users' MCP servers'
tokens (resource `mcp-servers`, `mcp/tokens.py`) and channel connections' credentials (resource
`channels`, `channels/credentials.py`).

agent-runner may store, delete and resolve secrets of its own resources only (the secrets service
checks it); a value is resolved where it is used and never returned by a route.
"""

from __future__ import annotations

from dataclasses import dataclass

from popagent.secrets.v1 import secrets_pb2, secrets_pb2_grpc
from popagent_core.errors import NotFound
from popagent_core.grpc_client import map_rpc_errors

SECRETS_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class NamedSecrets:
    stub: secrets_pb2_grpc.SecretsServiceStub
    resource: str

    async def put(self, name: str, value: str) -> None:
        with map_rpc_errors():
            await self.stub.PutSecret(
                secrets_pb2.PutSecretRequest(resource_id=self.resource, name=name, value=value),
                timeout=SECRETS_TIMEOUT_S,
            )

    async def delete(self, name: str) -> None:
        with map_rpc_errors():
            listed = await self.stub.ListSecrets(
                secrets_pb2.ListSecretsRequest(resource_id=self.resource), timeout=SECRETS_TIMEOUT_S
            )
        for secret in listed.secrets:
            if secret.name != name:
                continue
            try:
                with map_rpc_errors():
                    await self.stub.DeleteSecret(
                        secrets_pb2.DeleteSecretRequest(id=secret.id), timeout=SECRETS_TIMEOUT_S
                    )
            except NotFound:
                pass  # deleted meanwhile

    async def resolve(self, name: str) -> str:
        with map_rpc_errors():
            answer = await self.stub.ResolveToken(
                secrets_pb2.ResolveTokenRequest(resource_id=self.resource, name=name), timeout=SECRETS_TIMEOUT_S
            )
        return answer.value
