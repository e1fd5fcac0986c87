-- What users thought of an answer: thumbs up or down, an optional bounded comment, on one
-- assistant message or one turn, linked to the turn's trace. Written by the gateway.
CREATE TABLE popagent_feedback (
    id text PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT now(),
    rating text NOT NULL CHECK (rating IN ('up', 'down')),
    comment text NOT NULL DEFAULT '' CHECK (length(comment) <= 2000),
    session_id text NOT NULL,
    message_id text,
    turn_id text,
    trace_id text NOT NULL,
    CHECK (message_id IS NOT NULL OR turn_id IS NOT NULL)
);

CREATE INDEX popagent_feedback_created ON popagent_feedback (created_at);
CREATE INDEX popagent_feedback_trace ON popagent_feedback (trace_id);
