-- name: insert_runs
INSERT INTO popagent_hook_runs
    (event, handler_id, outcome, failure_class, duration_ms, session_id, turn_id, tool_call_id,
     target, event_id, reason, created_at, signed)
SELECT event, handler_id, outcome, failure_class, duration_ms, session_id, turn_id, tool_call_id,
       target, event_id, reason, created_at, signed
FROM unnest(
    $1::text[], $2::text[], $3::text[], $4::text[], $5::integer[], $6::text[], $7::text[], $8::text[],
    $9::text[], $10::text[], $11::text[], $12::timestamptz[], $13::boolean[]
) AS runs (event, handler_id, outcome, failure_class, duration_ms, session_id, turn_id, tool_call_id,
           target, event_id, reason, created_at, signed)

-- name: delete_expired
DELETE FROM popagent_hook_runs WHERE created_at < now() - make_interval(days => $1)

-- name: cap_sessions
-- Keep the newest $2 rows of each listed session.
DELETE FROM popagent_hook_runs AS r
USING (
    SELECT id FROM (
        SELECT id, row_number() OVER (PARTITION BY session_id ORDER BY created_at DESC, id DESC) AS rank
        FROM popagent_hook_runs
        WHERE session_id = ANY($1::text[])
    ) AS ranked
    WHERE rank > $2
) AS excess
WHERE r.id = excess.id

-- name: cap_all_sessions
DELETE FROM popagent_hook_runs AS r
USING (
    SELECT id FROM (
        SELECT id, row_number() OVER (PARTITION BY session_id ORDER BY created_at DESC, id DESC) AS rank
        FROM popagent_hook_runs
        WHERE session_id IS NOT NULL
    ) AS ranked
    WHERE rank > $1
) AS excess
WHERE r.id = excess.id

-- name: list_session_runs
-- The newest $2 rows of one session, returned oldest first.
SELECT id, event, handler_id, outcome, failure_class, duration_ms, session_id, turn_id, tool_call_id,
       target, event_id, reason, created_at, signed
FROM (
    SELECT id, event, handler_id, outcome, failure_class, duration_ms, session_id, turn_id, tool_call_id,
           target, event_id, reason, created_at, signed
    FROM popagent_hook_runs
    WHERE session_id = $1
    ORDER BY created_at DESC, id DESC
    LIMIT $2
) AS latest
ORDER BY created_at, id

-- name: delete_session_runs
DELETE FROM popagent_hook_runs WHERE session_id = $1
