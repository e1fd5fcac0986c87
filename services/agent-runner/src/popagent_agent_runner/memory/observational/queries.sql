-- Queries of observational memory: settings, the thread's raw messages with their token counts,
-- the observation log and its cursor.

-- name: memory_settings
SELECT enabled, observation_message_tokens, reflection_observation_tokens, raw_history_retention_messages,
       async_observation_enabled, observation_buffer_activation, observation_block_after,
       async_reflection_enabled, reflection_buffer_activation, reflection_block_after,
       idle_activation_seconds, activate_on_provider_change, shared_budget, previous_observation_max_tokens,
       temporal_markers, forward_attachments, retrieval_scope, observer_instructions, reflector_instructions
FROM popagent_memory_settings WHERE id = 1

-- name: observation_state
-- The thread's cursor ($1); no row: nothing observed yet.
SELECT generation, observed_seq, buffered_seq, calibration, last_model, last_turn_at, last_compaction_at
FROM popagent_observation_state WHERE thread_id = $1

-- name: ensure_observation_state
INSERT INTO popagent_observation_state (thread_id) VALUES ($1) ON CONFLICT (thread_id) DO NOTHING

-- name: lock_observation_state
SELECT generation, observed_seq, buffered_seq, calibration, last_model, last_turn_at, last_compaction_at
FROM popagent_observation_state WHERE thread_id = $1 FOR UPDATE

-- name: raw_messages
-- The thread's messages after seq $2, oldest first, without message $3 and what follows it (a
-- retried prompt); `tokens` is NULL until counted.
WITH stop AS (
    SELECT coalesce(min(seq), 9223372036854775807) AS seq
    FROM popagent_thread_messages WHERE thread_id = $1 AND id = $3
)
SELECT m.seq, m.id, m.role, (m.content -> 'model')::text AS model, m.created_at, m.tokens
FROM popagent_thread_messages m, stop
WHERE m.thread_id = $1 AND m.seq > $2 AND m.seq < stop.seq
ORDER BY m.seq

-- name: store_message_tokens
-- Each message's count, stored once.
UPDATE popagent_thread_messages m SET tokens = c.tokens
FROM unnest($2::bigint[], $3::integer[]) AS c(seq, tokens)
WHERE m.thread_id = $1 AND m.seq = c.seq AND m.tokens IS NULL

-- name: observation_log
-- The thread's current log (generation $2): active entries, oldest first, and buffered ones after.
SELECT seq, kind, content, tokens, first_message_seq, last_message_seq, message_tokens, active, created_at
FROM popagent_observations
WHERE thread_id = $1 AND generation = $2
ORDER BY active DESC, seq

-- name: insert_observation
INSERT INTO popagent_observations (
    thread_id, generation, kind, content, tokens, first_message_seq, last_message_seq, message_tokens, active,
    model, activated_at
) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, CASE WHEN $9 THEN now() END)
RETURNING seq

-- name: advance_cursor
-- After an observation: the active cursor (never backwards) and the buffered one.
UPDATE popagent_observation_state
SET observed_seq = greatest(observed_seq, $2), buffered_seq = greatest(buffered_seq, $3, $2),
    last_compaction_at = now(), updated_at = now()
WHERE thread_id = $1

-- name: activate_buffered
-- Buffered entries of generation $2 with last message seq <= $3 join the context.
UPDATE popagent_observations SET active = true, activated_at = now()
WHERE thread_id = $1 AND generation = $2 AND NOT active AND last_message_seq <= $3

-- name: start_generation
-- A reflection: the log continues as generation $2 (older generations stay as they were).
UPDATE popagent_observation_state
SET generation = $2, last_compaction_at = now(), updated_at = now()
WHERE thread_id = $1

-- name: carry_buffered
-- Buffered entries move to the new generation $3 (the reflection did not cover them).
UPDATE popagent_observations SET generation = $3
WHERE thread_id = $1 AND generation = $2 AND NOT active

-- name: buffered_reflection
-- The reflection buffered for generation $2 (by a background reflection of generation $2 - 1), if any.
SELECT seq, last_message_seq FROM popagent_observations
WHERE thread_id = $1 AND generation = $2 AND kind = 'reflection' AND NOT active
ORDER BY seq DESC LIMIT 1

-- name: drop_buffered_reflections
DELETE FROM popagent_observations
WHERE thread_id = $1 AND generation = $2 AND kind = 'reflection' AND NOT active

-- name: activate_entry
UPDATE popagent_observations SET active = true, activated_at = now() WHERE thread_id = $1 AND seq = $2

-- name: copy_uncovered_entries
-- A buffered reflection's activation: generation $2's active entries after message seq $4 (which
-- the reflection does not cover) copied into generation $3, in their order.
INSERT INTO popagent_observations (
    thread_id, generation, kind, content, tokens, first_message_seq, last_message_seq, message_tokens, active,
    model, created_at, activated_at
)
SELECT thread_id, $3, kind, content, tokens, first_message_seq, last_message_seq, message_tokens, true,
       model, created_at, now()
FROM popagent_observations
WHERE thread_id = $1 AND generation = $2 AND active AND last_message_seq > $4
ORDER BY seq

-- name: finish_turn
-- The model $2 and end of thread $1's latest turn, and the calibration after it ($3) if it still is
-- the one the turn's count was based on ($4; $3 NULL: left as it is). Returned with the cursor:
-- what the background work is decided on, the tokens of the messages after the buffered cursor
-- (NULL while one of them is uncounted) and of the current log's active entries.
WITH recorded AS (
    INSERT INTO popagent_observation_state (thread_id, last_model, last_turn_at, calibration)
    VALUES ($1, $2, now(), coalesce($3, 1.0))
    ON CONFLICT (thread_id) DO UPDATE
    SET last_model = $2, last_turn_at = now(), updated_at = now(),
        calibration = CASE
            WHEN $3 IS NOT NULL AND popagent_observation_state.calibration = $4 THEN $3
            ELSE popagent_observation_state.calibration
        END
    RETURNING generation, buffered_seq
)
SELECT r.generation, r.buffered_seq,
       (SELECT CASE WHEN count(*) = count(m.tokens) THEN coalesce(sum(m.tokens), 0) END
        FROM popagent_thread_messages m
        WHERE m.thread_id = $1 AND m.seq > r.buffered_seq)::bigint AS unbuffered_tokens,
       (SELECT coalesce(sum(o.tokens), 0)
        FROM popagent_observations o
        WHERE o.thread_id = $1 AND o.generation = r.generation AND o.active)::bigint AS active_log_tokens
FROM recorded r

-- name: observation_generations
-- Every generation of a thread's log with its size (the session memory view).
SELECT generation, count(*) AS entries, sum(tokens)::bigint AS tokens, sum(message_tokens)::bigint AS message_tokens,
       min(created_at) AS created_at, bool_or(kind = 'reflection') AS reflected
FROM popagent_observations WHERE thread_id = $1
GROUP BY generation ORDER BY generation

-- Exact recall ------------------------------------------------------------------------

-- name: recall_full_text
-- Original messages matching any stemmed word of query $1 (ranked by ts_rank_cd), in thread $2 only
-- or ($3) in every `popagent-user` thread; the asking turn's message ($5, once stored) and what
-- follows it are left out. At most $4.
WITH query AS (
    SELECT to_tsquery('simple', string_agg(quote_literal(lexeme), ' | ')) AS q
    FROM unnest(tsvector_to_array(to_tsvector('english', $1))) AS lexeme
),
asking AS (
    SELECT coalesce(min(seq), 9223372036854775807) AS seq
    FROM popagent_thread_messages WHERE thread_id = $2 AND id = $5
)
SELECT m.thread_id, m.seq, m.id, m.role, m.created_at, m.content -> 'ui' ->> 'parts' AS parts,
       ts_rank_cd(m.search, query.q) AS rank
FROM popagent_thread_messages m
JOIN popagent_threads t ON t.id = m.thread_id
CROSS JOIN query, asking
WHERE query.q IS NOT NULL AND m.search @@ query.q
  AND (m.thread_id = $2 OR ($3 AND t.resource_id = 'popagent-user'))
  AND NOT (m.thread_id = $2 AND m.seq >= asking.seq)
ORDER BY rank DESC, m.created_at DESC
LIMIT $4

-- name: recall_unembedded
-- Messages in scope (thread $1, or every `popagent-user` thread when $2) without an embedding for
-- model $3, newest first, at most $4 (the asking turn's message $5 and what follows left out).
WITH asking AS (
    SELECT coalesce(min(seq), 9223372036854775807) AS seq
    FROM popagent_thread_messages WHERE thread_id = $1 AND id = $5
)
SELECT m.thread_id, m.seq, m.content -> 'ui' ->> 'parts' AS parts
FROM popagent_thread_messages m
JOIN popagent_threads t ON t.id = m.thread_id
CROSS JOIN asking
WHERE (m.thread_id = $1 OR ($2 AND t.resource_id = 'popagent-user'))
  AND NOT (m.thread_id = $1 AND m.seq >= asking.seq)
  AND NOT EXISTS (
      SELECT 1 FROM popagent_message_embeddings e WHERE e.thread_id = m.thread_id AND e.seq = m.seq AND e.model = $3
  )
ORDER BY m.created_at DESC
LIMIT $4

-- name: store_message_embeddings
INSERT INTO popagent_message_embeddings (thread_id, seq, model, embedding)
SELECT t, s, $4, e::vector FROM unnest($1::text[], $2::bigint[], $3::text[]) AS x(t, s, e)
ON CONFLICT DO NOTHING

-- name: recall_vector
-- The messages in scope nearest to embedding $3 (cosine distance) for model $4, at most $5 (the
-- asking turn's message $6 and what follows left out).
WITH asking AS (
    SELECT coalesce(min(seq), 9223372036854775807) AS seq
    FROM popagent_thread_messages WHERE thread_id = $1 AND id = $6
)
SELECT m.thread_id, m.seq, m.id, m.role, m.created_at, m.content -> 'ui' ->> 'parts' AS parts,
       e.embedding <=> $3::vector AS distance
FROM popagent_message_embeddings e
JOIN popagent_thread_messages m ON m.thread_id = e.thread_id AND m.seq = e.seq
JOIN popagent_threads t ON t.id = m.thread_id
CROSS JOIN asking
WHERE e.model = $4
  AND (m.thread_id = $1 OR ($2 AND t.resource_id = 'popagent-user'))
  AND NOT (m.thread_id = $1 AND m.seq >= asking.seq)
ORDER BY distance
LIMIT $5

-- name: retrieval_scope
SELECT retrieval_scope FROM popagent_memory_settings WHERE id = 1

-- name: session_exists
SELECT 1 FROM popagent_sessions WHERE id = $1 AND deleting_at IS NULL
