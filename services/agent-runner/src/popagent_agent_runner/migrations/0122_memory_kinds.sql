-- Long-term memories (issue 19): a kind (fact or preference), a pin (a memory the user pinned is
-- never changed by the agent; `remember` leaves it as it is), and, when an embedding model is
-- configured, one embedding per memory and model for hybrid cross-session recall.
ALTER TABLE popagent_memories
    ADD COLUMN kind text NOT NULL DEFAULT 'fact' CHECK (kind IN ('fact', 'preference')),
    ADD COLUMN pinned boolean NOT NULL DEFAULT false;

-- Agent-written, unpinned memories age out by updated_at (the retention setting).
CREATE INDEX popagent_memories_retention ON popagent_memories (updated_at) WHERE source = 'agent' AND NOT pinned;

CREATE TABLE popagent_memory_embeddings (
    memory_id uuid NOT NULL REFERENCES popagent_memories (id) ON DELETE CASCADE,
    model text NOT NULL CHECK (length(model) BETWEEN 1 AND 200),
    -- The content the embedding is of: an edited memory is embedded again.
    content_md5 text NOT NULL,
    embedding vector NOT NULL,
    PRIMARY KEY (memory_id, model)
);
