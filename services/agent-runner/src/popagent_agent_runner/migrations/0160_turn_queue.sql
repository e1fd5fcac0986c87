-- Double texting (docs/turns.md): besides 'reject' and 'enqueue', 'interrupt' cancels the running
-- turn (its answer so far stays, marked cancelled) and starts the new one; 'rollback' cancels it
-- and drops its prompt and answer from the session.
ALTER TABLE popagent_sessions DROP CONSTRAINT popagent_sessions_double_texting_check;
ALTER TABLE popagent_sessions ADD CONSTRAINT popagent_sessions_double_texting_check
    CHECK (double_texting IN ('reject', 'enqueue', 'interrupt', 'rollback'));

-- Queued turns ('enqueue') are records: they wait for the session's running turn, oldest first,
-- holding what they will run (`request`: the user UI message as the gateway passed it on, redacted,
-- with the model, workspace and trace). The runner waiting with one renews its lease; a queued turn
-- whose lease passed (its runner died) is adopted by another runner, which runs it in its time.
ALTER TABLE popagent_turns DROP CONSTRAINT popagent_turns_status_check;
ALTER TABLE popagent_turns ADD CONSTRAINT popagent_turns_status_check
    CHECK (status IN ('queued', 'running', 'completed', 'failed', 'cancelled', 'interrupted'));
ALTER TABLE popagent_turns DROP CONSTRAINT popagent_turns_check;
ALTER TABLE popagent_turns ADD CONSTRAINT popagent_turns_ended_check
    CHECK ((status IN ('queued', 'running')) = (ended_at IS NULL));
ALTER TABLE popagent_turns ADD COLUMN queued_at timestamptz, ADD COLUMN request jsonb;
ALTER TABLE popagent_turns ADD CONSTRAINT popagent_turns_queued_request
    CHECK (status <> 'queued' OR (request IS NOT NULL AND queued_at IS NOT NULL));
CREATE INDEX popagent_turns_queue ON popagent_turns (session_id, queued_at, id) WHERE status = 'queued';

-- A background task's attempt is a turn too (its record and log, followed like a chat turn's); its
-- task is named, so a cancel through the turn route points to the task's own.
ALTER TABLE popagent_turns ADD COLUMN task_id text;
