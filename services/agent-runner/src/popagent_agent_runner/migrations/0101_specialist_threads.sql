-- Delegated specialists run on isolated threads of their own; each records the chat
-- thread it was delegated from, so deleting a session's thread removes its specialist
-- threads (and their messages) in the same statement.
ALTER TABLE popagent_threads
    ADD COLUMN parent_id text REFERENCES popagent_threads (id) ON DELETE CASCADE;

CREATE INDEX popagent_threads_by_parent ON popagent_threads (parent_id) WHERE parent_id IS NOT NULL;
