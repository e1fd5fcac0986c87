-- Warning and error log records of every process (bounded and redacted before they are written).
CREATE TABLE popagent_logs (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    logged_at timestamptz NOT NULL,
    level text NOT NULL,
    service text NOT NULL,
    logger text NOT NULL,
    message text NOT NULL,
    trace_id text,
    span_id text,
    attributes jsonb NOT NULL
);

CREATE INDEX popagent_logs_logged ON popagent_logs (logged_at);
CREATE INDEX popagent_logs_trace ON popagent_logs (trace_id) WHERE trace_id IS NOT NULL;
