"""/api/mcp-servers: users' MCP servers, whose tools the agents granted them get (docs/interop.md).

Stored by agent-runner, which runs their tools; a server's bearer token goes to the secrets
service and no route returns it (`tokenSet` says one is stored).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response

from popagent.agent_runner.v1 import mcp_servers_pb2 as pb
from popagent_gateway.deps import AgentRunnerMcpStub
from popagent_gateway.dto.mcp_servers import (
    SERVER_ID_PATTERN,
    McpHttpServerCreate,
    McpServerCreate,
    McpServerListOut,
    McpServerOut,
    McpServerPatch,
    McpServerTestOut,
    McpStdioServerCreate,
)
from popagent_gateway.wire import from_message

router = APIRouter(prefix="/mcp-servers", tags=["mcp-servers"])

ServerId = Annotated[str, Path(min_length=36, max_length=36, pattern=SERVER_ID_PATTERN)]


def _fields(body: McpHttpServerCreate | McpStdioServerCreate | McpServerPatch) -> pb.McpServerFields:
    fields = pb.McpServerFields()
    for name in body.model_fields_set:
        value = getattr(body, name)
        if value is None:
            continue
        if name == "args":
            fields.args.values.extend(value)
            fields.args.SetInParent()
        elif name == "agents":
            fields.agents.grants.extend(
                pb.McpAgentGrant(agent_id=agent_id, tools=grant.tools) for agent_id, grant in value.items()
            )
            fields.agents.SetInParent()
        elif name == "allowed_hosts":
            fields.allowed_hosts.extend(value)
        else:
            setattr(fields, name, value)
    return fields


def _out(server: pb.McpServer) -> McpServerOut:
    grants = {grant.agent_id: {"tools": list(grant.tools)} for grant in server.agents}
    fields = {name: getattr(server, name) for name in McpServerOut.model_fields if name != "agents"}
    return McpServerOut.model_validate({**fields, "args": list(server.args), "agents": grants})


@router.get("", response_model=McpServerListOut)
async def list_mcp_servers(stub: AgentRunnerMcpStub) -> McpServerListOut:
    """Every MCP server, by name, with the agents that get its tools (never a token)."""
    response = await stub.ListMcpServers(pb.ListMcpServersRequest())
    return McpServerListOut(servers=[_out(server) for server in response.servers])


@router.post("", response_model=McpServerOut, status_code=201)
async def create_mcp_server(body: McpServerCreate, stub: AgentRunnerMcpStub) -> McpServerOut:
    """Add a server: `http` (a streamable HTTP url, an optional bearer token) or `stdio` (a command
    run in the sandbox); a name in use is 409."""
    return _out(await stub.CreateMcpServer(pb.CreateMcpServerRequest(fields=_fields(body))))


@router.get("/{server_id}", response_model=McpServerOut)
async def get_mcp_server(server_id: ServerId, stub: AgentRunnerMcpStub) -> McpServerOut:
    return _out(await stub.GetMcpServer(pb.GetMcpServerRequest(id=server_id)))


@router.patch("/{server_id}", response_model=McpServerOut)
async def update_mcp_server(server_id: ServerId, body: McpServerPatch, stub: AgentRunnerMcpStub) -> McpServerOut:
    """Change the fields sent; `agents` replaces the grants; a `token` of "" removes the stored one."""
    request = pb.UpdateMcpServerRequest(id=server_id, fields=_fields(body))
    return _out(await stub.UpdateMcpServer(request))


@router.delete("/{server_id}", status_code=204, response_class=Response)
async def delete_mcp_server(server_id: ServerId, stub: AgentRunnerMcpStub) -> Response:
    """Delete the server, its grants and its stored token."""
    await stub.DeleteMcpServer(pb.DeleteMcpServerRequest(id=server_id))
    return Response(status_code=204)


@router.post("/{server_id}/test", response_model=McpServerTestOut)
async def test_mcp_server(server_id: ServerId, stub: AgentRunnerMcpStub) -> McpServerTestOut:
    """Connect to the server as a turn would and list its tools; `ok` false says why it failed."""
    return from_message(McpServerTestOut, await stub.TestMcpServer(pb.TestMcpServerRequest(id=server_id)))
