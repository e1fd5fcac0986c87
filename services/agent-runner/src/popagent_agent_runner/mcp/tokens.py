"""The MCP servers' bearer tokens in the secrets service: resource `mcp-servers`, named by server id.

A token is resolved when a connection to its server is opened, and held by that connection's HTTP
client only.
"""

from __future__ import annotations

from dataclasses import dataclass

from popagent_agent_runner.state.named_secrets import NamedSecrets

TOKEN_RESOURCE = "mcp-servers"


@dataclass(frozen=True)
class SecretTokens(NamedSecrets):
    resource: str = TOKEN_RESOURCE
