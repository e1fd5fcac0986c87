-- name: list_servers
SELECT s.id, s.name, s.transport, s.url, s.token_set, s.command, s.args, s.enabled, s.created_at, s.updated_at,
       COALESCE((SELECT jsonb_agg(jsonb_build_object('agent_id', g.agent_id, 'tools', g.tools) ORDER BY g.agent_id)
                 FROM popagent_mcp_server_grants g WHERE g.server_id = s.id), '[]'::jsonb)::text AS grants
FROM popagent_mcp_servers s
ORDER BY s.name

-- name: get_server
SELECT s.id, s.name, s.transport, s.url, s.token_set, s.command, s.args, s.enabled, s.created_at, s.updated_at,
       COALESCE((SELECT jsonb_agg(jsonb_build_object('agent_id', g.agent_id, 'tools', g.tools) ORDER BY g.agent_id)
                 FROM popagent_mcp_server_grants g WHERE g.server_id = s.id), '[]'::jsonb)::text AS grants
FROM popagent_mcp_servers s
WHERE s.id = $1

-- name: lock_server
SELECT id FROM popagent_mcp_servers WHERE id = $1 FOR UPDATE

-- name: insert_server
INSERT INTO popagent_mcp_servers (id, name, transport, url, token_set, command, args, enabled)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)

-- name: update_server
UPDATE popagent_mcp_servers
SET name = $2, transport = $3, url = $4, token_set = $5, command = $6, args = $7, enabled = $8, updated_at = now()
WHERE id = $1

-- name: delete_grants
DELETE FROM popagent_mcp_server_grants WHERE server_id = $1

-- name: insert_grant
INSERT INTO popagent_mcp_server_grants (server_id, agent_id, tools) VALUES ($1, $2, $3)

-- name: delete_server
DELETE FROM popagent_mcp_servers WHERE id = $1 RETURNING token_set

-- name: granted_servers
-- The enabled servers granted to any of the agents $1, with each such grant.
SELECT s.id, s.name, s.transport, s.url, s.token_set, s.command, s.args, s.updated_at,
       g.agent_id, g.tools
FROM popagent_mcp_server_grants g
JOIN popagent_mcp_servers s ON s.id = g.server_id
WHERE g.agent_id = ANY($1::text[]) AND s.enabled
ORDER BY s.name, g.agent_id
