"""The MCP servers' bearer tokens in the secrets service: resource `mcp-servers`, named by server id.

agent-runner may store, delete and resolve secrets of that resource only (the secrets service
checks it); a token is resolved when a connection to its server is opened, and held by that
connection's HTTP client only.
"""

from __future__ import annotations

from dataclasses import dataclass

from popagent.secrets.v1 import secrets_pb2, secrets_pb2_grpc
from popagent_core.errors import NotFound
from popagent_core.grpc_client import map_rpc_errors

TOKEN_RESOURCE = "mcp-servers"
SECRETS_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class SecretTokens:
    stub: secrets_pb2_grpc.SecretsServiceStub

    async def put(self, server_id: str, token: str) -> None:
        with map_rpc_errors():
            await self.stub.PutSecret(
                secrets_pb2.PutSecretRequest(resource_id=TOKEN_RESOURCE, name=server_id, value=token),
                timeout=SECRETS_TIMEOUT_S,
            )

    async def delete(self, server_id: str) -> None:
        with map_rpc_errors():
            listed = await self.stub.ListSecrets(
                secrets_pb2.ListSecretsRequest(resource_id=TOKEN_RESOURCE), timeout=SECRETS_TIMEOUT_S
            )
        for secret in listed.secrets:
            if secret.name != server_id:
                continue
            try:
                with map_rpc_errors():
                    await self.stub.DeleteSecret(
                        secrets_pb2.DeleteSecretRequest(id=secret.id), timeout=SECRETS_TIMEOUT_S
                    )
            except NotFound:
                pass  # deleted meanwhile

    async def resolve(self, server_id: str) -> str:
        with map_rpc_errors():
            answer = await self.stub.ResolveToken(
                secrets_pb2.ResolveTokenRequest(resource_id=TOKEN_RESOURCE, name=server_id),
                timeout=SECRETS_TIMEOUT_S,
            )
        return answer.value
