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
