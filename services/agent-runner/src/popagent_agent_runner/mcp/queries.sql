-- name: list_servers
SELECT s.id, s.name, s.transport, s.url, s.token_set, s.command, s.args, s.enabled, s.created_at, s.updated_at,
       s.auth, s.oauth_connected, s.oauth_expires_at, s.oauth_error,
       COALESCE((SELECT jsonb_agg(jsonb_build_object('agent_id', g.agent_id, 'tools', g.tools) ORDER BY g.agent_id)
                 FROM popagent_mcp_server_grants g WHERE g.server_id = s.id), '[]'::jsonb)::text AS grants
FROM popagent_mcp_servers s
ORDER BY s.name

-- name: get_server
SELECT s.id, s.name, s.transport, s.url, s.token_set, s.command, s.args, s.enabled, s.created_at, s.updated_at,
       s.auth, s.oauth_connected, s.oauth_expires_at, s.oauth_error,
       COALESCE((SELECT jsonb_agg(jsonb_build_object('agent_id', g.agent_id, 'tools', g.tools) ORDER BY g.agent_id)
                 FROM popagent_mcp_server_grants g WHERE g.server_id = s.id), '[]'::jsonb)::text AS grants
FROM popagent_mcp_servers s
WHERE s.id = $1

-- name: lock_server
SELECT id FROM popagent_mcp_servers WHERE id = $1 FOR UPDATE

-- name: insert_server
INSERT INTO popagent_mcp_servers (id, name, transport, url, token_set, command, args, enabled, auth)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)

-- name: update_server
UPDATE popagent_mcp_servers
SET name = $2, transport = $3, url = $4, token_set = $5, command = $6, args = $7, enabled = $8, auth = $9,
    updated_at = now()
WHERE id = $1

-- name: delete_grants
DELETE FROM popagent_mcp_server_grants WHERE server_id = $1

-- name: insert_grant
INSERT INTO popagent_mcp_server_grants (server_id, agent_id, tools) VALUES ($1, $2, $3)

-- name: delete_server
DELETE FROM popagent_mcp_servers WHERE id = $1 RETURNING token_set, auth

-- name: granted_servers
-- The enabled servers granted to any of the agents $1, with each such grant.
SELECT s.id, s.name, s.transport, s.url, s.token_set, s.command, s.args, s.updated_at, s.auth,
       g.agent_id, g.tools
FROM popagent_mcp_server_grants g
JOIN popagent_mcp_servers s ON s.id = g.server_id
WHERE g.agent_id = ANY($1::text[]) AND s.enabled
ORDER BY s.name, g.agent_id

-- name: clear_oauth
-- The server's OAuth state forgotten: its url or its auth changed, or its tokens were dropped.
UPDATE popagent_mcp_servers
SET oauth_connected = false, oauth_expires_at = NULL, oauth_error = '', oauth_server = NULL
WHERE id = $1

-- name: oauth_server
SELECT id, name, url, auth, oauth_connected, oauth_expires_at, oauth_server::text AS oauth_server
FROM popagent_mcp_servers WHERE id = $1

-- name: set_oauth_server
-- What discovery found (public metadata); tokens of an earlier authorization stay until replaced.
UPDATE popagent_mcp_servers SET oauth_server = $2::jsonb WHERE id = $1 AND auth = 'oauth' AND url = $3

-- name: set_oauth_tokens
-- Tokens were stored (an exchange or a refresh): connected, expiring at $2.
UPDATE popagent_mcp_servers SET oauth_connected = true, oauth_expires_at = $2, oauth_error = ''
WHERE id = $1 AND auth = 'oauth'

-- name: clear_oauth_tokens
-- A new client was registered: tokens of the old one are gone.
UPDATE popagent_mcp_servers SET oauth_connected = false, oauth_expires_at = NULL, oauth_error = ''
WHERE id = $1

-- name: set_oauth_refused
-- The authorization server refused the refresh: the user must connect the server again.
UPDATE popagent_mcp_servers SET oauth_connected = false, oauth_expires_at = NULL, oauth_error = $2
WHERE id = $1 AND auth = 'oauth'

-- name: insert_oauth_start
INSERT INTO popagent_mcp_oauth_starts (state_sha256, server_id, code_verifier, redirect_uri, expires_at)
VALUES ($1, $2, $3, $4, $5)

-- name: purge_oauth_starts
DELETE FROM popagent_mcp_oauth_starts WHERE expires_at < now()

-- name: take_oauth_start
-- Single use: the row is gone whether or not it is still valid.
DELETE FROM popagent_mcp_oauth_starts WHERE state_sha256 = $1
RETURNING server_id, code_verifier, redirect_uri, expires_at, expires_at > now() AS valid

-- name: lock_oauth_refresh
-- One refresh of a server's tokens at a time across agent-runner processes (refresh tokens may rotate).
SELECT pg_advisory_xact_lock(hashtext('popagent_mcp_oauth:' || $1))
