-- Long-term memories (spec: popagent_memories): facts and preferences kept across
-- sessions, written by the `remember` tool or through /api/memories. They are not thread
-- data: deleting a session keeps them (session_id and turn_id are provenance only).
-- Recall ranks them with PostgreSQL full-text search over `search`; there are no
-- embeddings, so no vector index.
CREATE TABLE popagent_memories (
    id uuid PRIMARY KEY,
    content text NOT NULL CHECK (length(content) BETWEEN 1 AND 2000),
    source text NOT NULL CHECK (source IN ('user', 'agent')),
    session_id text CHECK (session_id IS NULL OR length(session_id) BETWEEN 1 AND 128),
    turn_id text CHECK (turn_id IS NULL OR length(turn_id) BETWEEN 1 AND 128),
    search tsvector GENERATED ALWAYS AS (to_tsvector('english', content)) STORED,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX popagent_memories_search ON popagent_memories USING gin (search);
CREATE INDEX popagent_memories_recent ON popagent_memories (updated_at DESC, id);
-- The same fact is kept once, however often the agent is told to remember it.
CREATE UNIQUE INDEX popagent_memories_content ON popagent_memories (md5(lower(content)));
