-- What learning changed (spec: popagent_learned_overlays, learned skills, and the append-only
-- popagent_evolution_revisions). Overlays are kept apart from the agents' instructions
-- (agent-runner composes them after the immutable user base); learned skills apart from
-- the user's skills (a user skill of the same name shadows one).

-- One overlay per agent: sections keyed by the strategy that wrote them.
CREATE TABLE popagent_learned_overlays (
    agent_id text PRIMARY KEY CHECK (agent_id ~ '^[a-z][a-z0-9-]{0,62}$'),
    sections jsonb NOT NULL CHECK (jsonb_typeof(sections) = 'object'),
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE popagent_learned_skills (
    id uuid PRIMARY KEY,
    agent_id text NOT NULL CHECK (agent_id ~ '^[a-z][a-z0-9-]{0,62}$'),
    name text NOT NULL CHECK (length(name) BETWEEN 1 AND 64 AND name ~ '^[a-z0-9]+(-[a-z0-9]+)*$'),
    description text NOT NULL CHECK (length(description) BETWEEN 1 AND 1024),
    instructions text NOT NULL CHECK (length(instructions) BETWEEN 1 AND 50000),
    -- false once a user edited it (adopted): evolution never changes or reverts it again.
    evolution_managed boolean NOT NULL,
    -- false after a revert removed it; the row stays for the revisions that name it.
    active boolean NOT NULL,
    adopted_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (agent_id, name)
);

CREATE TABLE popagent_evolution_revisions (
    id uuid PRIMARY KEY,
    -- Order of revisions (the latest of a target is its highest position).
    position bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    target_kind text NOT NULL CHECK (target_kind IN ('overlay', 'skill')),
    -- 'overlay:<agent>' or 'skill:<agent>:<name>'.
    target_key text NOT NULL CHECK (length(target_key) BETWEEN 1 AND 200),
    agent_id text NOT NULL,
    -- The target's managed content before and after (NULL: absent).
    before jsonb,
    after jsonb,
    -- The strategy that made it, or 'revert'.
    strategy text NOT NULL CHECK (length(strategy) BETWEEN 1 AND 64),
    signal_ids uuid[] NOT NULL,
    trace_ids text[] NOT NULL,
    reverts_revision_id uuid REFERENCES popagent_evolution_revisions (id),
    created_at timestamptz NOT NULL DEFAULT now(),
    CHECK ((strategy = 'revert') = (reverts_revision_id IS NOT NULL))
);

-- At most one compensation per source revision.
CREATE UNIQUE INDEX popagent_evolution_revisions_one_revert
    ON popagent_evolution_revisions (reverts_revision_id) WHERE reverts_revision_id IS NOT NULL;
CREATE INDEX popagent_evolution_revisions_target ON popagent_evolution_revisions (target_key, position DESC);
CREATE INDEX popagent_evolution_revisions_recent ON popagent_evolution_revisions (position DESC);

-- Append-only: a revision is never changed or removed.
CREATE FUNCTION popagent_evolution_revisions_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'popagent_evolution_revisions is append-only';
END;
$$;

CREATE TRIGGER popagent_evolution_revisions_append_only
    BEFORE UPDATE OR DELETE ON popagent_evolution_revisions
    FOR EACH ROW EXECUTE FUNCTION popagent_evolution_revisions_append_only();
