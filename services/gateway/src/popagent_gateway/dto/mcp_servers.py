"""Users' MCP servers (popagent_mcp_servers): their tools reach the agents granted them as mcp__<name>__<tool>.

A bearer token goes in with a create or an update and never comes back: answers say `tokenSet` only.
An OAuth server's tokens and client credentials never come back either: answers say `oauth` only.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, Field
from pydantic.json_schema import SkipJsonSchema

from popagent_gateway.dto import URL_PATTERN, PatchModel, WireInput, WireModel
from popagent_gateway.dto.agents import AGENT_ID_PATTERN

SERVER_NAME_PATTERN = r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$"
SERVER_ID_PATTERN = r"^mcp-[0-9a-f]{32}$"
ServerName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=32,
        pattern=SERVER_NAME_PATTERN,
        description="lowercase letters and digits, words joined by single underscores; the model sees "
        "the server's tools as mcp__<name>__<tool>",
    ),
]
Url = Annotated[str, Field(min_length=1, max_length=2000, pattern=URL_PATTERN)]
Token = Annotated[
    str,
    Field(
        max_length=8000,
        pattern=r"^[\x21-\x7e]*$",
        description="a bearer token (printable ASCII) sent as `Authorization: Bearer`; stored in the secrets "
        "service, never returned; an empty string removes the stored one",
    ),
]
Command = Annotated[str, Field(min_length=1, max_length=1000, pattern=r"^[^\x00]*[^\x00\s][^\x00]*$")]
Args = Annotated[list[Annotated[str, Field(max_length=8000, pattern=r"^[^\x00]*$")]], Field(max_length=64)]
ToolName = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[^\x00]+$")]
AgentId = Annotated[str, Field(pattern=AGENT_ID_PATTERN, max_length=63)]
NO_ALLOWED_HOSTS = (
    "allowedHosts is not supported: a stdio server runs in the sandbox, which has no network at all, and "
    "per-host allowances cannot be enforced there; leave it empty"
)


def _no_allowed_hosts(hosts: list[str]) -> list[str]:
    if hosts:
        raise ValueError(NO_ALLOWED_HOSTS)
    return hosts


AllowedHosts = Annotated[
    list[str],
    BeforeValidator(lambda hosts: _no_allowed_hosts(hosts) if isinstance(hosts, list) else hosts),
    Field(max_length=0, description=NO_ALLOWED_HOSTS),
]


class McpAgentGrant(WireModel):
    tools: Annotated[list[ToolName], Field(max_length=200)] = Field(
        default_factory=list[str], description="the server's tools this agent gets; empty: all of them"
    )


class McpAgentGrantIn(WireInput):
    tools: Annotated[list[ToolName], Field(max_length=200)] = Field(
        default_factory=list[str], description="the server's tools this agent gets; empty: all of them"
    )


Grants = Annotated[
    dict[AgentId, McpAgentGrantIn],
    Field(
        max_length=100,
        description="agent id -> the grant: which agents get the server's tools",
        # pydantic states the key pattern as patternProperties, which admits any other key: say that
        # no other key is taken, as validation refuses one.
        json_schema_extra={"additionalProperties": False},
    ),
]


Auth = Annotated[
    Literal["bearer", "oauth"],
    Field(
        description="http servers: `bearer` (the optional `token`) or `oauth` (OAuth 2.1, connected through "
        "/oauth/start; takes no token)"
    ),
]


class McpOAuthOut(WireModel):
    connected: bool = Field(description="tokens are held and were not refused")
    expires_at: str | None = Field(description="when the access token held expires (it is refreshed before)")
    error: str = Field(description="why the server must be connected again (a refused refresh), or empty")


class McpServerOut(WireModel):
    id: str
    name: str
    transport: Literal["http", "stdio"]
    url: str = Field(description="the streamable HTTP endpoint (http servers)")
    token_set: bool = Field(description="whether a bearer token is stored (the token itself is never returned)")
    command: str = Field(description="the program run in the sandbox (stdio servers)")
    args: list[str]
    enabled: bool
    agents: dict[str, McpAgentGrant] = Field(description="agent id -> its grant: the agents that get the tools")
    created_at: str
    updated_at: str
    auth: Literal["bearer", "oauth", "none"] = Field(description="`none` for stdio servers")
    oauth: McpOAuthOut | None = Field(description="an oauth server's connection; null for other servers")


class McpServerListOut(WireModel):
    servers: list[McpServerOut]


class McpHttpServerCreate(WireInput):
    name: ServerName
    transport: Literal["http"]
    url: Url
    auth: Literal["bearer"] | SkipJsonSchema[None] = Field(default=None, description="a bearer token, or none")
    token: Token | SkipJsonSchema[None] = None
    enabled: bool | SkipJsonSchema[None] = None
    agents: Grants | SkipJsonSchema[None] = None


class McpOAuthServerCreate(WireInput):
    """An http server connected through OAuth 2.1 (/oauth/start); it takes no token."""

    name: ServerName
    transport: Literal["http"]
    url: Url
    auth: Literal["oauth"]
    enabled: bool | SkipJsonSchema[None] = None
    agents: Grants | SkipJsonSchema[None] = None


class McpStdioServerCreate(WireInput):
    name: ServerName
    transport: Literal["stdio"]
    command: Command
    args: Args | SkipJsonSchema[None] = None
    allowed_hosts: AllowedHosts | SkipJsonSchema[None] = None
    enabled: bool | SkipJsonSchema[None] = None
    agents: Grants | SkipJsonSchema[None] = None


McpServerCreate = McpHttpServerCreate | McpOAuthServerCreate | McpStdioServerCreate


class McpServerPatch(PatchModel):
    """Checked against the stored server too (a url for a stdio server is 400 naming it)."""

    name: ServerName | SkipJsonSchema[None] = None
    transport: Literal["http", "stdio"] | SkipJsonSchema[None] = None
    url: Url | SkipJsonSchema[None] = None
    auth: Auth | SkipJsonSchema[None] = None
    token: Token | SkipJsonSchema[None] = None
    command: Command | SkipJsonSchema[None] = None
    args: Args | SkipJsonSchema[None] = None
    allowed_hosts: AllowedHosts | SkipJsonSchema[None] = None
    enabled: bool | SkipJsonSchema[None] = None
    agents: Grants | SkipJsonSchema[None] = None


class McpToolOut(WireModel):
    name: str
    description: str
    model_name: str = Field(description="mcp__<server>__<tool> as the model sees it; empty when it cannot be offered")


class McpServerTestOut(WireModel):
    ok: bool
    error: str = Field(description="why the connection or the listing failed (ok false)")
    server_name: str
    server_version: str
    tools: list[McpToolOut]


class McpOAuthStartOut(WireModel):
    authorization_url: str = Field(description="where the user authorizes popagent (open it in a browser window)")
    expires_at: str = Field(description="when the state in that URL stops being accepted")
