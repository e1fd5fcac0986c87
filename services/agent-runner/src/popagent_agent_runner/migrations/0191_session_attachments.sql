-- Files a user attached to a chat session. The bytes live here (bounded per file by the service,
-- 4 MiB) and go with their session: deleting the session row removes them.
CREATE TABLE popagent_session_attachments (
    id text PRIMARY KEY CHECK (id ~ '^att-[0-9a-f]{32}$'),
    session_id text NOT NULL REFERENCES popagent_sessions (id) ON DELETE CASCADE,
    filename text NOT NULL CHECK (length(filename) BETWEEN 1 AND 255),
    media_type text NOT NULL CHECK (length(media_type) BETWEEN 1 AND 100),
    size integer NOT NULL CHECK (size BETWEEN 1 AND 4194304),
    content bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX popagent_session_attachments_by_session ON popagent_session_attachments (session_id, created_at, id);
