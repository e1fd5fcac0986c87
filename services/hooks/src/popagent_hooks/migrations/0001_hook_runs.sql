-- Hook decisions (spec: popagent_hook_runs): bounded metadata only, never raw event
-- payloads or transcripts. Retention (30 days, 500 rows per session) is enforced by the
-- service after writes and by its daily maintenance job.
CREATE TABLE popagent_hook_runs (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event text NOT NULL,
    handler_id text NOT NULL,
    outcome text NOT NULL CHECK (outcome IN ('pass', 'deny', 'modify', 'continue')),
    failure_class text CHECK (failure_class IN ('transport', 'timeout', 'malformed_response', 'event_outcome')),
    duration_ms integer NOT NULL CHECK (duration_ms >= 0),
    session_id text CHECK (char_length(session_id) <= 200),
    turn_id text CHECK (char_length(turn_id) <= 200),
    tool_call_id text CHECK (char_length(tool_call_id) <= 200),
    target text CHECK (char_length(target) <= 200),
    event_id text NOT NULL CHECK (char_length(event_id) <= 200),
    reason text NOT NULL CHECK (octet_length(reason) <= 2048),
    created_at timestamptz NOT NULL
);

-- Latest rows of one session (the API and the per-session cap).
CREATE INDEX popagent_hook_runs_session ON popagent_hook_runs (session_id, created_at DESC, id DESC)
    WHERE session_id IS NOT NULL;
-- Age-based expiry.
CREATE INDEX popagent_hook_runs_created ON popagent_hook_runs (created_at);
