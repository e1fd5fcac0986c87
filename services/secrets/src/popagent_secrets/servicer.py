"""SecretsService: who may call what, then proto <-> store.

Plaintext leaves only through ResolveSecret, to browser-bridge, and ResolveToken, to
agent-runner for the bearer tokens of users' MCP servers (resource `mcp-servers`) and the
credentials of channel connections (resource `channels`); each proves
who it is with its own internal credential (the kernel interceptor authenticates it and sets
`caller_var`). Management RPCs answer the gateway (the authenticated `/api/secrets` edge),
and agent-runner for the `mcp-servers` and `channels` resources only (it stores a server's token
or a connection's credentials as /api/mcp-servers and /api/channels hand them over): agents have no tool that creates, changes or reads values.
"""

from __future__ import annotations

import grpc

from popagent.secrets.v1 import secrets_pb2, secrets_pb2_grpc
from popagent_core.auth import caller_var
from popagent_core.errors import PermissionDenied
from popagent_secrets.models import SecretInfo
from popagent_secrets.store import SecretStore

RESOLVER = "browser-bridge"
MANAGERS = frozenset({"gateway"})
# The MCP servers' bearer tokens, named by server id, and the channel connections' credentials,
# named by connection id: agent-runner stores, deletes and resolves these, and no other resource.
TOKEN_RESOURCE = "mcp-servers"
CHANNEL_RESOURCE = "channels"
TOKEN_RESOURCES = frozenset({TOKEN_RESOURCE, CHANNEL_RESOURCE})
TOKEN_KEEPER = "agent-runner"
# Listing shows names and bindings only; the runner and the bridge may read it (the
# browser issue's `useBrowserSecret` needs to know which secrets exist).
READERS = frozenset({"gateway", "agent-runner", "browser-bridge"})


def _require(allowed: frozenset[str], action: str) -> None:
    caller = caller_var.get()
    if caller not in allowed:
        raise PermissionDenied(f"caller {caller or 'unknown'} may not {action}")


def _info(info: SecretInfo) -> secrets_pb2.SecretInfo:
    return secrets_pb2.SecretInfo(
        id=info.id,
        resource_id=info.resource_id,
        name=info.name,
        origins=list(info.origins),
        created_at=info.created_at.isoformat(),
        updated_at=info.updated_at.isoformat(),
    )


class SecretsServicer(secrets_pb2_grpc.SecretsServiceServicer):
    def __init__(self, store: SecretStore) -> None:
        self.store = store

    async def PutSecret(
        self, request: secrets_pb2.PutSecretRequest, context: grpc.aio.ServicerContext
    ) -> secrets_pb2.PutSecretResponse:
        if not (caller_var.get() == TOKEN_KEEPER and request.resource_id in TOKEN_RESOURCES):
            _require(MANAGERS, "store secrets")
        stored = await self.store.put(request.resource_id, request.name, request.value)
        return secrets_pb2.PutSecretResponse(secret=_info(stored.info), created=stored.created)

    async def ListSecrets(
        self, request: secrets_pb2.ListSecretsRequest, context: grpc.aio.ServicerContext
    ) -> secrets_pb2.ListSecretsResponse:
        _require(READERS, "list secrets")
        infos = await self.store.list_secrets(request.resource_id)
        return secrets_pb2.ListSecretsResponse(secrets=[_info(info) for info in infos])

    async def DeleteSecret(
        self, request: secrets_pb2.DeleteSecretRequest, context: grpc.aio.ServicerContext
    ) -> secrets_pb2.DeleteSecretResponse:
        if caller_var.get() == TOKEN_KEEPER:
            await self.store.delete(request.id, only_resources=TOKEN_RESOURCES)
            return secrets_pb2.DeleteSecretResponse()
        _require(MANAGERS, "delete secrets")
        await self.store.delete(request.id)
        return secrets_pb2.DeleteSecretResponse()

    async def BindOrigin(
        self, request: secrets_pb2.BindOriginRequest, context: grpc.aio.ServicerContext
    ) -> secrets_pb2.SecretInfo:
        _require(MANAGERS, "bind secret origins")
        return _info(await self.store.bind(request.resource_id, request.name, request.origin))

    async def UnbindOrigin(
        self, request: secrets_pb2.UnbindOriginRequest, context: grpc.aio.ServicerContext
    ) -> secrets_pb2.SecretInfo:
        _require(MANAGERS, "unbind secret origins")
        return _info(await self.store.unbind(request.resource_id, request.name, request.origin))

    async def ResolveSecret(
        self, request: secrets_pb2.ResolveSecretRequest, context: grpc.aio.ServicerContext
    ) -> secrets_pb2.ResolveSecretResponse:
        # Checked before anything else, so no other caller learns even whether a secret exists.
        if caller_var.get() != RESOLVER:
            raise PermissionDenied("only browser-bridge may resolve secrets")
        value = await self.store.resolve(request.resource_id, request.name, request.origin)
        return secrets_pb2.ResolveSecretResponse(value=value)

    async def ResolveToken(
        self, request: secrets_pb2.ResolveTokenRequest, context: grpc.aio.ServicerContext
    ) -> secrets_pb2.ResolveSecretResponse:
        if caller_var.get() != TOKEN_KEEPER or request.resource_id not in TOKEN_RESOURCES:
            raise PermissionDenied(
                f"only {TOKEN_KEEPER} may resolve tokens, and only of {', '.join(sorted(TOKEN_RESOURCES))}"
            )
        return secrets_pb2.ResolveSecretResponse(
            value=await self.store.resolve_token(request.resource_id, request.name)
        )
