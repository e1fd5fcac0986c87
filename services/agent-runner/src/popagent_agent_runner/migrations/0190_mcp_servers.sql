-- Users' own MCP servers (docs/interop.md): their tools are offered to the agents granted them as
-- mcp__<name>__<tool>. A server's bearer token is kept in the secrets service (resource
-- `mcp-servers`, named by the server's id); `token_set` only says that one is stored.
CREATE TABLE popagent_mcp_servers (
    id text PRIMARY KEY,
    -- No double underscore: `mcp__<name>__<tool>` must split back into server and tool.
    name text NOT NULL UNIQUE CHECK (name ~ '^[a-z][a-z0-9]*(_[a-z0-9]+)*$' AND length(name) <= 32),
    transport text NOT NULL CHECK (transport IN ('http', 'stdio')),
    url text NOT NULL DEFAULT '' CHECK (length(url) <= 2000),
    token_set boolean NOT NULL DEFAULT false,
    command text NOT NULL DEFAULT '' CHECK (length(command) <= 1000),
    args text[] NOT NULL DEFAULT '{}',
    enabled boolean NOT NULL DEFAULT true,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CHECK ((transport = 'http') = (url <> '')),
    CHECK ((transport = 'stdio') = (command <> '')),
    CHECK (transport = 'http' OR NOT token_set)
);

-- Which agents get a server's tools: all of them (`tools` empty) or only those named.
CREATE TABLE popagent_mcp_server_grants (
    server_id text NOT NULL REFERENCES popagent_mcp_servers (id) ON DELETE CASCADE,
    agent_id text NOT NULL REFERENCES popagent_agents (id) ON DELETE CASCADE,
    tools text[] NOT NULL DEFAULT '{}',
    PRIMARY KEY (server_id, agent_id)
);
CREATE INDEX popagent_mcp_server_grants_agent ON popagent_mcp_server_grants (agent_id);
