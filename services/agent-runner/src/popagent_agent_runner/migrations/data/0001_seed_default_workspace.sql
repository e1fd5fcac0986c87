-- The default repository registration: the workspace/popagent checkout (relative to
-- POPAGENT_WORKSPACE_ROOT). Every session without an explicit workspace belongs to it.
INSERT INTO popagent_agent_workspaces (id, name, path, description)
VALUES ('popagent', 'popagent', 'popagent', 'The popagent repository checkout (workspace/popagent).')
ON CONFLICT (id) DO NOTHING;
