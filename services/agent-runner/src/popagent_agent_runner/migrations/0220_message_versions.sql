-- Versions of an edited user message, as a chat shows them (< 2/3 >): each edit starts a branch
-- from that message on. The branch shown has no stored copy (its messages are the session's and
-- the thread's own); every other one keeps the session's UI messages and the thread's rows from
-- that message on, as they were when the user switched away from it. Deleting the session
-- deletes its versions.
CREATE TABLE popagent_message_versions (
    session_id text NOT NULL REFERENCES popagent_sessions (id) ON DELETE CASCADE,
    message_id text NOT NULL,
    version integer NOT NULL CHECK (version >= 1),
    -- A JSON array of AI SDK UI messages, and of thread rows ({id, role, content, tokens}).
    ui_messages jsonb,
    thread_rows jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, message_id, version),
    CHECK ((ui_messages IS NULL) = (thread_rows IS NULL))
);
-- One version of a message is the one shown.
CREATE UNIQUE INDEX popagent_message_versions_one_shown
    ON popagent_message_versions (session_id, message_id) WHERE ui_messages IS NULL;
