-- Each process's exporter figures, upserted by its span store writer every few seconds, so the
-- gateway's /api/observability/health shows every process's queue depth, drops and last error.
CREATE TABLE popagent_exporters (
    service text NOT NULL,
    -- host:pid of the process.
    instance text NOT NULL,
    started_at timestamptz NOT NULL,
    seen_at timestamptz NOT NULL,
    exported_spans bigint NOT NULL,
    dropped_spans bigint NOT NULL,
    exported_logs bigint NOT NULL,
    dropped_logs bigint NOT NULL,
    queue_depth integer NOT NULL,
    queue_limit integer NOT NULL,
    -- The last failed write (kept after export resumed), and when it happened.
    last_error text NOT NULL DEFAULT '',
    last_error_at timestamptz,
    PRIMARY KEY (service, instance)
);

CREATE INDEX popagent_exporters_seen ON popagent_exporters (seen_at);
