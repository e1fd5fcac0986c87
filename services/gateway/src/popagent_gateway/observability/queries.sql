-- The gateway's reads of the observability store (schema `observability`, OBSERVABILITY_DATABASE_URL).
-- The tables are the span store's (popagent_core/span_store_migrations); the gateway owns none of them.

-- name: probe
SELECT 1 AS ok

-- name: list_exporters
-- Every process's heartbeat (popagent_core.span_store) seen in the last $1 seconds; stale: none for $2 seconds.
SELECT service, instance, started_at, seen_at, exported_spans, dropped_spans, exported_logs, dropped_logs,
       queue_depth, queue_limit, last_error, last_error_at,
       extract(epoch FROM now() - seen_at)::float8 > $2 AS stale
FROM popagent_exporters
WHERE seen_at >= now() - make_interval(secs => $1)
ORDER BY service, instance

-- name: overview_turns
-- A turn is the supervisor's `agent.run` span: the only one that carries `popagent.turn_id`.
SELECT count(*) AS turns,
       count(*) FILTER (WHERE status = 'error' OR attributes ? 'error.type') AS errors,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_ms) AS p50_ms,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY duration_ms) AS p95_ms
FROM popagent_spans
WHERE name = 'agent.run' AND attributes ? 'popagent.turn_id' AND started_at >= $1 AND started_at < $2

-- name: overview_series
-- The same turns per bucket of $3 seconds from $1, for the overview's charts (empty buckets are absent).
SELECT date_bin(make_interval(secs => $3), started_at, $1) AS started_at,
       count(*) AS turns,
       count(*) FILTER (WHERE status = 'error' OR attributes ? 'error.type') AS errors,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_ms) AS latency_p50_ms,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY duration_ms) AS latency_p95_ms
FROM popagent_spans
WHERE name = 'agent.run' AND attributes ? 'popagent.turn_id' AND started_at >= $1 AND started_at < $2
GROUP BY 1
ORDER BY 1

-- name: overview_first_token
-- Time to first token of every model call (the attribute is in seconds).
SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY first_chunk_s) * 1000 AS p50_ms,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY first_chunk_s) * 1000 AS p95_ms
FROM (
    SELECT (attributes ->> 'gen_ai.response.time_to_first_chunk')::float8 AS first_chunk_s
    FROM popagent_spans
    WHERE name = 'model.generation' AND attributes ? 'gen_ai.response.time_to_first_chunk'
      AND started_at >= $1 AND started_at < $2
) AS calls

-- name: overview_tokens
SELECT coalesce(attributes ->> 'gen_ai.response.model', attributes ->> 'gen_ai.request.model', '') AS model,
       coalesce(agent_id, '') AS agent_id,
       count(*) AS calls,
       sum(coalesce((attributes ->> 'gen_ai.usage.input_tokens')::bigint, 0)) AS input_tokens,
       sum(coalesce((attributes ->> 'gen_ai.usage.output_tokens')::bigint, 0)) AS output_tokens,
       sum(coalesce((attributes ->> 'gen_ai.usage.cache_read.input_tokens')::bigint, 0)) AS cached_input_tokens,
       -- NULL when no call of the group was priced (the catalog gave no price for its model).
       sum((attributes ->> 'popagent.usage.cost_usd')::float8) AS cost_usd
FROM popagent_spans
WHERE name = 'model.generation' AND started_at >= $1 AND started_at < $2
GROUP BY 1, 2
ORDER BY 1, 2

-- name: list_traces
-- Newest first, keyset-paginated on (started_at, trace_id) < ($6, $7). A trace is its spans that
-- started since $1 (the window's start), listed when its first one started before $2. With $9, only
-- traces of a turn (the supervisor's `agent.run` span, as the overview counts turns), and then $5
-- is that turn's own status, so "failed turns" here are the overview's.
WITH traces AS (
    SELECT trace_id,
           min(started_at) AS started_at,
           max(ended_at) AS ended_at,
           count(*) AS span_count,
           bool_or(status = 'error') AS failed,
           bool_or(name = 'agent.run' AND attributes ? 'popagent.turn_id') AS turn,
           bool_or(
               name = 'agent.run' AND attributes ? 'popagent.turn_id' AND (status = 'error' OR attributes ? 'error.type')
           ) AS turn_failed,
           max(session_id) AS session_id,
           coalesce(array_agg(DISTINCT agent_id) FILTER (WHERE agent_id IS NOT NULL), '{}') AS agents,
           array_agg(DISTINCT service) AS services
    FROM popagent_spans
    WHERE started_at >= $1
    GROUP BY trace_id
    HAVING min(started_at) < $2
)
SELECT t.trace_id, t.started_at, t.ended_at, t.span_count, t.failed, t.turn, t.turn_failed, t.session_id,
       t.agents, t.services, root.name AS root_name
FROM traces AS t
CROSS JOIN LATERAL (
    SELECT s.name FROM popagent_spans AS s
    WHERE s.trace_id = t.trace_id
    ORDER BY s.started_at, s.span_id
    LIMIT 1
) AS root
WHERE ($3::text IS NULL OR t.session_id = $3)
  AND ($4::text IS NULL OR $4 = ANY (t.agents))
  AND (NOT $9::boolean OR t.turn)
  AND ($5::boolean IS NULL OR (CASE WHEN $9::boolean THEN t.turn_failed ELSE t.failed END) = $5)
  AND ($6::timestamptz IS NULL OR (t.started_at, t.trace_id) < ($6, $7::text))
ORDER BY t.started_at DESC, t.trace_id DESC
LIMIT $8

-- name: trace_spans
SELECT trace_id, span_id, parent_span_id, name, kind, service, started_at, ended_at, duration_ms, status,
       status_message, attributes
FROM popagent_spans
WHERE trace_id = $1
ORDER BY started_at, span_id
LIMIT $2

-- name: list_logs
-- Newest first, keyset-paginated on id < $6.
SELECT id, logged_at, level, service, logger, message, trace_id, span_id, attributes
FROM popagent_logs
WHERE logged_at >= $1 AND logged_at < $2
  AND ($3::text IS NULL OR service = $3)
  AND ($4::text[] IS NULL OR level = ANY ($4))
  AND ($5::text IS NULL OR trace_id = $5)
  AND ($6::bigint IS NULL OR id < $6)
ORDER BY id DESC
LIMIT $7

-- name: insert_feedback
INSERT INTO popagent_feedback (id, rating, comment, session_id, message_id, turn_id, trace_id)
VALUES ($1, $2, $3, $4, $5, $6, $7)
RETURNING id, created_at, rating, comment, session_id, message_id, turn_id, trace_id

-- name: delete_feedback
DELETE FROM popagent_feedback WHERE id = $1

-- name: list_feedback
-- Newest first, keyset-paginated on (created_at, id) < ($6, $7).
SELECT id, created_at, rating, comment, session_id, message_id, turn_id, trace_id
FROM popagent_feedback
WHERE created_at >= $1 AND created_at < $2
  AND ($3::text IS NULL OR session_id = $3)
  AND ($4::text IS NULL OR rating = $4)
  AND ($5::text IS NULL OR trace_id = $5)
  AND ($6::timestamptz IS NULL OR (created_at, id) < ($6, $7::text))
ORDER BY created_at DESC, id DESC
LIMIT $8
