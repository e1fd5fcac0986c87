-- The persisted system agents (spec: popagent_agents). Seeded once by data migration
-- 0004; after that this table is canonical and code holds no role-prompt fallback.
CREATE TABLE popagent_agents (
    id text PRIMARY KEY CHECK (id ~ '^[a-z][a-z0-9-]{0,62}$'),
    position smallint NOT NULL UNIQUE,
    display_name text NOT NULL CHECK (length(display_name) BETWEEN 1 AND 100),
    description text NOT NULL CHECK (length(description) BETWEEN 1 AND 2000),
    instructions text NOT NULL CHECK (length(instructions) BETWEEN 1 AND 50000),
    source_url text NOT NULL CHECK (length(source_url) <= 2000),
    workspace_access text NOT NULL CHECK (workspace_access IN ('none', 'read-only', 'read-write')),
    browser_access text NOT NULL CHECK (browser_access IN ('none', 'read-only', 'interactive')),
    delegation_eligible boolean NOT NULL,
    tools text[] NOT NULL,
    -- NULL: inherit the request-selected or persisted default model.
    model text CHECK (model IS NULL OR length(model) BETWEEN 1 AND 200),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
