-- Exact recall (issue 19): the `recall` tool searches a thread's original messages, or every
-- `popagent-user` thread's, by full text (the UI text of each message) and, when an embedding model
-- is configured, by vectors from the model gateway (computed once per message and model).
ALTER TABLE popagent_thread_messages ADD COLUMN search tsvector GENERATED ALWAYS AS (
    to_tsvector('english', coalesce(jsonb_path_query_array(content, '$.ui.parts[*] ? (@.type == "text").text')::text, ''))
) STORED;

CREATE INDEX popagent_thread_messages_search ON popagent_thread_messages USING gin (search);

CREATE EXTENSION IF NOT EXISTS vector;

CREATE TABLE popagent_message_embeddings (
    thread_id text NOT NULL,
    seq bigint NOT NULL,
    model text NOT NULL CHECK (length(model) BETWEEN 1 AND 200),
    embedding vector NOT NULL,
    PRIMARY KEY (thread_id, seq, model),
    FOREIGN KEY (thread_id, seq) REFERENCES popagent_thread_messages (thread_id, seq) ON DELETE CASCADE
);
