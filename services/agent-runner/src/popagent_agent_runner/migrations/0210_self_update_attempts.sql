-- One row per contained self-update attempt (turn/self_update.py): what it started from, how its
-- delegations ended, what verification said, and the local ref it imported (NULL: none, or deleted).
CREATE TABLE popagent_self_update_attempts (
    id text PRIMARY KEY CHECK (id ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$'),
    task_id text NOT NULL,
    attempt integer NOT NULL CHECK (attempt >= 1),
    workspace_id text NOT NULL,
    status text NOT NULL CHECK (status IN ('running', 'imported', 'no-op', 'refused', 'failed')),
    base_commit text NOT NULL DEFAULT '',
    base_branch text NOT NULL DEFAULT '',
    branch text NOT NULL DEFAULT '',
    -- [{"agent": "implementer", "status": "completed"}, ...] in the order they ended.
    delegations jsonb NOT NULL DEFAULT '[]',
    changed_paths text[] NOT NULL DEFAULT '{}',
    diff_stat text NOT NULL DEFAULT '',
    verification text NOT NULL DEFAULT '',
    commit text,
    ref text,
    -- [{"stage": "clone", "ms": 166}, ...]
    stages jsonb NOT NULL DEFAULT '[]',
    created_at timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);
CREATE INDEX popagent_self_update_attempts_recent ON popagent_self_update_attempts (workspace_id, created_at DESC);
