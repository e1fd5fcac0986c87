-- The observability store (OBSERVABILITY_DATABASE_URL, schema `observability`): never the application database.

-- One row per finished span of any process. Attributes are the span's own, already redacted
-- by the code that set them (no payloads, no prompts beyond a bounded preview).
CREATE TABLE popagent_spans (
    trace_id text NOT NULL,
    span_id text NOT NULL,
    parent_span_id text,
    name text NOT NULL,
    kind text NOT NULL,
    service text NOT NULL,
    started_at timestamptz NOT NULL,
    ended_at timestamptz NOT NULL,
    duration_ms double precision NOT NULL,
    status text NOT NULL,
    status_message text,
    attributes jsonb NOT NULL,
    -- Lifted from the attributes for the trace list's filters.
    session_id text,
    agent_id text,
    PRIMARY KEY (trace_id, span_id)
);

CREATE INDEX popagent_spans_started ON popagent_spans (started_at);
CREATE INDEX popagent_spans_session ON popagent_spans (session_id, started_at) WHERE session_id IS NOT NULL;
