-- Retention of the observability store (schema `observability`), run by every process's span store writer.

-- name: expire_spans
DELETE FROM popagent_spans WHERE started_at < now() - make_interval(days => $1)

-- name: expire_logs
DELETE FROM popagent_logs WHERE logged_at < now() - make_interval(days => $1)

-- name: expire_feedback
DELETE FROM popagent_feedback WHERE created_at < now() - make_interval(days => $1)

-- name: cap_spans
-- Keep about the newest $1 spans (rows that started at the same instant as the cut go together).
DELETE FROM popagent_spans
WHERE started_at <= (SELECT started_at FROM popagent_spans ORDER BY started_at DESC OFFSET $1 LIMIT 1)

-- name: cap_logs
DELETE FROM popagent_logs
WHERE id <= (SELECT id FROM popagent_logs ORDER BY id DESC OFFSET $1 LIMIT 1)

-- name: expire_exporters
-- Heartbeats of processes gone for a day.
DELETE FROM popagent_exporters WHERE seen_at < now() - interval '1 day'

-- name: heartbeat
INSERT INTO popagent_exporters (service, instance, started_at, seen_at, exported_spans, dropped_spans,
                                exported_logs, dropped_logs, queue_depth, queue_limit, last_error, last_error_at)
VALUES ($1, $2, $3, now(), $4, $5, $6, $7, $8, $9, $10, $11)
ON CONFLICT (service, instance) DO UPDATE
SET seen_at = now(), started_at = excluded.started_at, exported_spans = excluded.exported_spans,
    dropped_spans = excluded.dropped_spans, exported_logs = excluded.exported_logs,
    dropped_logs = excluded.dropped_logs, queue_depth = excluded.queue_depth, queue_limit = excluded.queue_limit,
    last_error = excluded.last_error, last_error_at = excluded.last_error_at
