-- The observability store (schema `observability`): every process's span store writer batches spans and logs
-- in, beats its heartbeat and runs the retention.

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

-- name: insert_spans
-- One batch of spans, a parameter per column (each an array, one element a span).
INSERT INTO popagent_spans (trace_id, span_id, parent_span_id, name, kind, service, started_at, ended_at,
                            duration_ms, status, status_message, attributes, session_id, agent_id)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                     $7::timestamptz[], $8::timestamptz[], $9::float8[], $10::text[], $11::text[], $12::jsonb[],
                     $13::text[], $14::text[])
ON CONFLICT DO NOTHING

-- name: insert_logs
-- One batch of log records, a parameter per column.
INSERT INTO popagent_logs (logged_at, level, service, logger, message, trace_id, span_id, attributes)
SELECT * FROM unnest($1::timestamptz[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                     $7::text[], $8::jsonb[])
