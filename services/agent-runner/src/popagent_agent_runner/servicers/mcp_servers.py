"""AgentRunnerMcpService: the users' MCP servers; proto <-> McpServerStore, and a connection test."""

from __future__ import annotations

import grpc

from popagent.agent_runner.v1 import mcp_servers_pb2 as pb
from popagent.agent_runner.v1 import mcp_servers_pb2_grpc
from popagent_agent_runner.mcp.oauth import OAuthKeeper
from popagent_agent_runner.mcp.store import Grant, McpServerChanges, McpServerRecord, McpServerStore
from popagent_agent_runner.mcp.toolbox import McpToolbox
from popagent_agent_runner.servicers.messages import message_of


def server_message(server: McpServerRecord) -> pb.McpServer:
    message = message_of(
        pb.McpServer,
        server,
        agents=[pb.McpAgentGrant(agent_id=grant.agent_id, tools=list(grant.tools)) for grant in server.agents],
        auth=server.auth if server.transport == "http" else "none",
    )
    if server.auth == "oauth":
        message.oauth.CopyFrom(
            pb.McpOAuthStatus(
                connected=server.oauth_connected,
                expires_at=server.oauth_expires_at.isoformat() if server.oauth_expires_at else "",
                error=server.oauth_error,
            )
        )
    return message


def _changes(fields: pb.McpServerFields) -> McpServerChanges:
    def optional(name: str) -> object:
        return getattr(fields, name) if fields.HasField(name) else None

    return McpServerChanges(
        name=optional("name"),  # type: ignore[arg-type]
        transport=optional("transport"),  # type: ignore[arg-type]
        url=optional("url"),  # type: ignore[arg-type]
        token=optional("token"),  # type: ignore[arg-type]
        command=optional("command"),  # type: ignore[arg-type]
        args=list(fields.args.values) if fields.HasField("args") else None,
        enabled=optional("enabled"),  # type: ignore[arg-type]
        agents=[Grant(grant.agent_id, tuple(grant.tools)) for grant in fields.agents.grants]
        if fields.HasField("agents")
        else None,
        allowed_hosts=list(fields.allowed_hosts),
        auth=optional("auth"),  # type: ignore[arg-type]
    )


class McpServersServicer(mcp_servers_pb2_grpc.AgentRunnerMcpServiceServicer):
    def __init__(self, store: McpServerStore, toolbox: McpToolbox, oauth: OAuthKeeper) -> None:
        self.store = store
        self.toolbox = toolbox
        self.oauth = oauth

    async def ListMcpServers(
        self, request: pb.ListMcpServersRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListMcpServersResponse:
        return pb.ListMcpServersResponse(servers=[server_message(server) for server in await self.store.list()])

    async def GetMcpServer(self, request: pb.GetMcpServerRequest, context: grpc.aio.ServicerContext) -> pb.McpServer:
        return server_message(await self.store.get(request.id))

    async def CreateMcpServer(
        self, request: pb.CreateMcpServerRequest, context: grpc.aio.ServicerContext
    ) -> pb.McpServer:
        return server_message(await self.store.create(_changes(request.fields)))

    async def UpdateMcpServer(
        self, request: pb.UpdateMcpServerRequest, context: grpc.aio.ServicerContext
    ) -> pb.McpServer:
        updated = await self.store.update(request.id, _changes(request.fields))
        self.toolbox.forget(request.id)
        return server_message(updated)

    async def DeleteMcpServer(
        self, request: pb.DeleteMcpServerRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteMcpServerResponse:
        await self.store.delete(request.id)
        self.toolbox.forget(request.id)
        return pb.DeleteMcpServerResponse()

    async def TestMcpServer(
        self, request: pb.TestMcpServerRequest, context: grpc.aio.ServicerContext
    ) -> pb.TestMcpServerResponse:
        tested = await self.toolbox.test(await self.store.get(request.id))
        return pb.TestMcpServerResponse(
            ok=tested.ok,
            error=tested.error,
            server_name=tested.server_name,
            server_version=tested.server_version,
            tools=[
                pb.McpToolInfo(name=tool.name, description=tool.description, model_name=tool.model_name)
                for tool in tested.tools
            ],
        )

    async def StartMcpOAuth(
        self, request: pb.StartMcpOAuthRequest, context: grpc.aio.ServicerContext
    ) -> pb.StartMcpOAuthResponse:
        started = await self.oauth.start(request.id, request.redirect_uri)
        return pb.StartMcpOAuthResponse(
            authorization_url=started.authorization_url, expires_at=started.expires_at.isoformat()
        )

    async def CompleteMcpOAuth(
        self, request: pb.CompleteMcpOAuthRequest, context: grpc.aio.ServicerContext
    ) -> pb.McpServer:
        server_id = await self.oauth.complete(
            request.state, request.code, request.error, request.error_description, request.iss
        )
        # This process's connection reconnects with the new tokens (others read them when they reconnect).
        self.toolbox.forget(server_id)
        return server_message(await self.store.get(server_id))
