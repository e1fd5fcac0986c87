-- Agent Skills (spec: popagent_agent_skills): per agent, database-backed skills in the
-- Agent Skills format (agentskills.io). These are the user-managed skills; learned skills
-- are evolution's, and a user skill shadows a learned one of the same name. Disabled skills
-- stay editable here but never reach a run.
CREATE TABLE popagent_agent_skills (
    id uuid PRIMARY KEY,
    agent_id text NOT NULL REFERENCES popagent_agents (id) ON DELETE CASCADE,
    -- The Agent Skills name rule: lowercase letters, digits and single inner hyphens, 1-64.
    name text NOT NULL CHECK (length(name) BETWEEN 1 AND 64 AND name ~ '^[a-z0-9]+(-[a-z0-9]+)*$'),
    description text NOT NULL CHECK (length(description) BETWEEN 1 AND 1024 AND btrim(description) <> ''),
    -- The SKILL.md body: Markdown instructions, loaded by the `skill` tool.
    instructions text NOT NULL CHECK (length(instructions) BETWEEN 1 AND 50000),
    -- Named references (relative path -> Markdown text), read one at a time by `skill_read`.
    named_references jsonb NOT NULL CHECK (jsonb_typeof(named_references) = 'object'),
    source_url text NOT NULL CHECK (length(source_url) <= 2000),
    attribution text NOT NULL CHECK (length(attribution) <= 1000),
    -- The optional SKILL.md front-matter fields, kept so an imported skill exports unchanged.
    license text NOT NULL CHECK (length(license) <= 200),
    compatibility text NOT NULL CHECK (length(compatibility) <= 500),
    metadata jsonb NOT NULL CHECK (jsonb_typeof(metadata) = 'object'),
    enabled boolean NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (agent_id, name)
);

CREATE INDEX popagent_agent_skills_enabled ON popagent_agent_skills (agent_id, name) WHERE enabled;
