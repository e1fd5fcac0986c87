-- Memory threads: the model-side history of each conversation (a chat session's thread
-- has the session's id and resource 'popagent-user'). Everything derived from a thread
-- (messages, observational-memory state, and any later per-thread artifact such as
-- vectors) references popagent_threads ON DELETE CASCADE, so deleting the thread row
-- removes all of it in one statement.
CREATE TABLE popagent_threads (
    id text PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 128),
    resource_id text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX popagent_threads_by_resource ON popagent_threads (resource_id, updated_at DESC);

CREATE TABLE popagent_thread_messages (
    thread_id text NOT NULL REFERENCES popagent_threads (id) ON DELETE CASCADE,
    seq bigint GENERATED ALWAYS AS IDENTITY,
    id text NOT NULL,
    role text NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
    content jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (thread_id, seq),
    UNIQUE (thread_id, id)
);

CREATE TABLE popagent_thread_state (
    thread_id text PRIMARY KEY REFERENCES popagent_threads (id) ON DELETE CASCADE,
    observations text NOT NULL DEFAULT '',
    state jsonb NOT NULL DEFAULT '{}',
    updated_at timestamptz NOT NULL DEFAULT now()
);
