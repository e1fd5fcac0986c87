-- Durable chat turns (docs/turns.md).
-- continue_on_disconnect: a chat turn runs on when its client goes away (agent-runtime setting;
-- seeded once by data migration 0013, the service checks it, no database default).
ALTER TABLE popagent_agent_runtime_settings ADD COLUMN continue_on_disconnect boolean;

-- A turn as a record: its status, the agent-runner that runs it and that runner's lease. The
-- runner renews the lease while the turn runs; a running turn whose lease passed has lost its
-- runner (killed, cut off), so followers stop waiting for it and the session can run its next turn.
-- At most one running turn per session, whichever runner runs it. No foreign key to the session:
-- its check would share-lock the session row at every turn's start and wait behind a writer that
-- holds it (storing the previous answer); a deleted session's turns go with its thread.
CREATE TABLE popagent_turns (
    id text PRIMARY KEY,
    session_id text NOT NULL,
    status text NOT NULL CHECK (status IN ('running', 'completed', 'failed', 'cancelled', 'interrupted')),
    runner_id text NOT NULL,
    lease_until timestamptz NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    ended_at timestamptz,
    CHECK ((status = 'running') = (ended_at IS NULL))
);
CREATE UNIQUE INDEX popagent_turns_one_running ON popagent_turns (session_id) WHERE status = 'running';
CREATE INDEX popagent_turns_session_recent ON popagent_turns (session_id, started_at DESC);
