-- OAuth 2.1 for users' streamable HTTP MCP servers (docs/interop.md, "OAuth servers"). The client
-- registered with the server's authorization server and the tokens it issued are kept in the
-- secrets service (resource `mcp-servers`, names `<id>.oauth-client` and `<id>.oauth-tokens`);
-- this table holds only what is public: the authorization server's metadata, the resource the
-- tokens are for, when the access token held expires, and why the server needs connecting again.
ALTER TABLE popagent_mcp_servers
    ADD COLUMN auth text NOT NULL DEFAULT 'bearer' CHECK (auth IN ('bearer', 'oauth')),
    ADD COLUMN oauth_connected boolean NOT NULL DEFAULT false,
    ADD COLUMN oauth_expires_at timestamptz,
    ADD COLUMN oauth_error text NOT NULL DEFAULT '',
    -- {"metadata": RFC 8414 metadata, "resource": RFC 8707 resource or null, "scope": str or null}
    ADD COLUMN oauth_server jsonb,
    ADD CONSTRAINT popagent_mcp_servers_oauth_http CHECK (auth = 'bearer' OR (transport = 'http' AND NOT token_set));

-- An authorization started and not yet come back: bound to its state (stored as its SHA-256, so this
-- table does not hold what the callback presents), used once, refused after `expires_at`.
CREATE TABLE popagent_mcp_oauth_starts (
    state_sha256 text PRIMARY KEY,
    server_id text NOT NULL REFERENCES popagent_mcp_servers (id) ON DELETE CASCADE,
    code_verifier text NOT NULL,
    redirect_uri text NOT NULL,
    expires_at timestamptz NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX popagent_mcp_oauth_starts_expiry ON popagent_mcp_oauth_starts (expires_at);
