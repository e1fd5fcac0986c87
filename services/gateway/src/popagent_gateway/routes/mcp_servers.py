"""/api/mcp-servers: users' MCP servers, whose tools the agents granted them get (docs/interop.md).

Stored by agent-runner, which runs their tools; a server's bearer token goes to the secrets
service and no route returns it (`tokenSet` says one is stored). An OAuth server is connected by
`/oauth/start` (the authorization URL) and the authorization server's redirect to `/oauth/callback`,
the one /api route without the API key: a browser redirect cannot carry it, so the single-use,
expiring state that `/oauth/start` issued is what authorizes it.
"""

from __future__ import annotations

import hashlib
import html
from base64 import b64encode
from typing import Annotated

import grpc
from fastapi import APIRouter, Path, Query, Request, Response
from fastapi.responses import HTMLResponse

from popagent.agent_runner.v1 import mcp_servers_pb2 as pb
from popagent_core.errors import PopagentError
from popagent_gateway.deps import AgentRunnerMcpStub, SettingsDep
from popagent_gateway.dto.mcp_servers import (
    SERVER_ID_PATTERN,
    McpHttpServerCreate,
    McpOAuthServerCreate,
    McpOAuthStartOut,
    McpServerCreate,
    McpServerListOut,
    McpServerOut,
    McpServerPatch,
    McpServerTestOut,
    McpStdioServerCreate,
)
from popagent_gateway.errors import client_message, edge_status
from popagent_gateway.wire import from_message

router = APIRouter(prefix="/mcp-servers", tags=["mcp-servers"])
# Mounted under /api without the API key dependency (app.py; bounded.KEYLESS_API_PATHS).
callback_router = APIRouter(prefix="/mcp-servers", tags=["mcp-servers"])
CALLBACK_PATH = "/api/mcp-servers/oauth/callback"

ServerId = Annotated[str, Path(min_length=36, max_length=36, pattern=SERVER_ID_PATTERN)]


def _fields(
    body: McpHttpServerCreate | McpOAuthServerCreate | McpStdioServerCreate | McpServerPatch,
) -> pb.McpServerFields:
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
    fields = {name: getattr(server, name) for name in McpServerOut.model_fields if name not in ("agents", "oauth")}
    oauth = (
        {
            "connected": server.oauth.connected,
            "expires_at": server.oauth.expires_at or None,
            "error": server.oauth.error,
        }
        if server.auth == "oauth"
        else None
    )
    return McpServerOut.model_validate({**fields, "args": list(server.args), "agents": grants, "oauth": oauth})


@router.get("", response_model=McpServerListOut)
async def list_mcp_servers(stub: AgentRunnerMcpStub) -> McpServerListOut:
    """Every MCP server, by name, with the agents that get its tools (never a token)."""
    response = await stub.ListMcpServers(pb.ListMcpServersRequest())
    return McpServerListOut(servers=[_out(server) for server in response.servers])


@router.post("", response_model=McpServerOut, status_code=201)
async def create_mcp_server(body: McpServerCreate, stub: AgentRunnerMcpStub) -> McpServerOut:
    """Add a server: `http` (a streamable HTTP url with an optional bearer token, or `auth: oauth`,
    connected through /oauth/start) or `stdio` (a command run in the sandbox); a name in use is 409."""
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


@router.post("/{server_id}/oauth/start", response_model=McpOAuthStartOut)
async def start_mcp_oauth(
    server_id: ServerId, request: Request, settings: SettingsDep, stub: AgentRunnerMcpStub
) -> McpOAuthStartOut:
    """Connect an oauth server: its authorization server discovered, a client registered with it
    (kept), and the URL the user authorizes at, whose state is accepted once, for 10 minutes."""
    redirect_uri = (
        f"{settings.public_url}{CALLBACK_PATH}" if settings.public_url else str(request.url_for("complete_mcp_oauth"))
    )
    started = await stub.StartMcpOAuth(pb.StartMcpOAuthRequest(id=server_id, redirect_uri=redirect_uri))
    return McpOAuthStartOut(authorization_url=started.authorization_url, expires_at=started.expires_at)


# The page tells the window that opened it (the MCP servers page) and closes itself.
_CLOSE_SCRIPT = (
    "if (window.opener) { window.opener.postMessage({type: 'popagent-mcp-oauth'}, window.location.origin); }"
    " setTimeout(function () { window.close(); }, 1500);"
)
_CLOSE_SCRIPT_HASH = b64encode(hashlib.sha256(_CLOSE_SCRIPT.encode()).digest()).decode()
_PAGE_POLICY = (
    f"default-src 'none'; script-src 'sha256-{_CLOSE_SCRIPT_HASH}'; style-src 'unsafe-inline'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
# Any text: the authorization server's redirect is checked here and refused as a page, never a JSON 422
# (agent-runner bounds the state and the code; the rest is only shown, shortened and escaped).
_Text = Annotated[str, Query()]
_PAGE_STATUSES = frozenset({400, 404, 409, 500, 503})
MAX_CALLBACK_VALUE_CHARS = 8192


def _page(status: int, title: str, detail: str) -> HTMLResponse:
    body = (
        "<!doctype html><html><head><meta charset=utf-8><title>popagent</title>"
        "<style>body{font-family:system-ui,sans-serif;margin:3em;}</style></head><body>"
        f"<h1>{html.escape(title)}</h1><p>{html.escape(detail)}</p>"
        + (f"<script>{_CLOSE_SCRIPT}</script>" if status == 200 else "")
        + "</body></html>"
    )
    return HTMLResponse(
        body, status_code=status, headers={"content-security-policy": _PAGE_POLICY, "cache-control": "no-store"}
    )


def _failed(code: grpc.StatusCode, detail: str) -> HTMLResponse:
    status = edge_status(code)
    if status not in _PAGE_STATUSES:
        status = 503 if status >= 500 else 400
    return _page(status, "Not connected", client_message(code, detail))


@callback_router.get(
    "/oauth/callback",
    response_class=HTMLResponse,
    responses={
        200: {"description": "connected: a page that closes itself", "content": {"text/html": {}}},
        400: {
            "description": "refused (a state not issued, used or expired; a refused code)",
            "content": {"text/html": {}},
        },
        404: {"description": "the server was deleted meanwhile", "content": {"text/html": {}}},
        409: {"description": "the server changed meanwhile: start again", "content": {"text/html": {}}},
        500: {"description": "an internal error", "content": {"text/html": {}}},
        503: {"description": "the authorization server could not be reached", "content": {"text/html": {}}},
    },
)
async def complete_mcp_oauth(
    stub: AgentRunnerMcpStub,
    state: _Text = "",
    code: _Text = "",
    error: _Text = "",
    error_description: _Text = "",
    iss: _Text = "",
) -> HTMLResponse:
    """The authorization server's redirect after the user authorized (RFC 6749 4.1.2). Without the
    API key: authorized by its `state`, which /oauth/start issued, used once and for 10 minutes."""
    if any(len(value) > MAX_CALLBACK_VALUE_CHARS for value in (state, code, error, error_description, iss)):
        return _page(400, "Not connected", "the authorization server's answer is too long")
    try:
        server = await stub.CompleteMcpOAuth(
            pb.CompleteMcpOAuthRequest(
                state=state, code=code, error=error, error_description=error_description, iss=iss
            )
        )
    except PopagentError as exc:
        return _failed(exc.grpc_code, exc.message)
    except grpc.aio.AioRpcError as exc:
        return _failed(exc.code(), exc.details() or "")
    return _page(200, f"Connected {server.name}", "You can close this window; popagent uses the server's tools now.")
