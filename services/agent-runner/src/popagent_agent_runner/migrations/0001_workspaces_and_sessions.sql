-- Repository definitions (AgentWorkspaceStore). Paths are relative to POPAGENT_WORKSPACE_ROOT;
-- the service checks containment (realpath, by path components) before every write.
CREATE TABLE popagent_agent_workspaces (
    id text PRIMARY KEY CHECK (id ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
    name text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    path text NOT NULL CHECK (length(path) BETWEEN 1 AND 1024),
    description text NOT NULL CHECK (length(description) <= 2000),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Chat sessions: display metadata plus the AI SDK UI messages the client saves.
-- `revision` is the optimistic lock: every successful save increments it in the same
-- UPDATE that checks it. `deleting_at` marks a permanent deletion in progress: such a
-- row is invisible to every read and only DeleteSession touches it again.
CREATE TABLE popagent_sessions (
    id text PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 128),
    title text NOT NULL CHECK (length(title) <= 500),
    title_locked boolean NOT NULL DEFAULT false,
    workspace_id text NOT NULL DEFAULT 'popagent' REFERENCES popagent_agent_workspaces (id),
    messages jsonb NOT NULL DEFAULT '[]',
    message_count integer NOT NULL DEFAULT 0 CHECK (message_count >= 0),
    revision bigint NOT NULL DEFAULT 0 CHECK (revision >= 0),
    archived_at timestamptz,
    deleting_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX popagent_sessions_recent ON popagent_sessions (updated_at DESC, id)
    WHERE deleting_at IS NULL;
CREATE INDEX popagent_sessions_by_workspace ON popagent_sessions (workspace_id, updated_at DESC, id);
CREATE INDEX popagent_sessions_deleting ON popagent_sessions (deleting_at) WHERE deleting_at IS NOT NULL;
