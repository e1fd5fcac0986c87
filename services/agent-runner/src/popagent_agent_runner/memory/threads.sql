-- Queries of the chat turn: sessions as the turn sees them, thread history.

-- name: turn_prelude
-- Everything a chat turn reads before it starts, in one round trip: the session's
-- workspace (id and registered path), the runtime-settings snapshot (turn.deps.RuntimeSnapshot's fields), the agent
-- profiles (AgentProfile's, with their enabled skills), the memories recalled for
-- prompt $3 (at most $4; see recall_memories) and the thread: its version (message count
-- and last seq), whether it already holds message $2 (a retried request), and its history,
-- the model-side messages oldest first as one JSON array (on a retry only what came before
-- message $2). The history is left out (NULL) when the caller's copy is of version ($5, $6)
-- and nothing is retried. No row: no such session.
-- Observational memory's reads ride along (memory.observational.store.ThreadRead): the memory
-- settings row, the thread's cursor, its current log (active entries oldest first, then buffered
-- ones), and the rows after the cursor (after seq 0 with memory disabled) before the retried
-- message, each with how many of the history's model messages it holds: the raw messages are
-- the history's tail, so they are not sent or parsed a second time.
WITH query AS (
    SELECT to_tsquery('simple', string_agg(quote_literal(lexeme), ' | ')) AS q
    FROM unnest(tsvector_to_array(to_tsvector('english', $3))) AS lexeme
),
thread AS (
    SELECT count(*) AS messages, coalesce(max(seq), 0) AS last_seq,
           max(seq) FILTER (WHERE id = $2) AS retried_seq
    FROM popagent_thread_messages
    WHERE thread_id = $1
),
memory AS (
    SELECT to_jsonb(ms) - 'id' - 'updated_at' AS settings, ms.enabled FROM popagent_memory_settings ms WHERE ms.id = 1
),
cursor AS (
    SELECT to_jsonb(o) - 'thread_id' - 'updated_at' AS state, o.generation, o.observed_seq
    FROM popagent_observation_state o WHERE o.thread_id = $1
)
SELECT s.workspace_id,
       (SELECT w.path FROM popagent_agent_workspaces w WHERE w.id = s.workspace_id) AS workspace_path,
       (
           SELECT coalesce(jsonb_agg(r.content ORDER BY r.rank DESC, r.updated_at DESC), '[]'::jsonb)
           FROM (
               SELECT m.content, ts_rank_cd(m.search, query.q) AS rank, m.updated_at
               FROM popagent_memories m, query
               WHERE query.q IS NOT NULL AND m.search @@ query.q
               ORDER BY rank DESC, m.updated_at DESC
               LIMIT $4
           ) r
       )::text AS recalled,
       (
           SELECT jsonb_build_object(
               'default_model', r.default_model, 'supervisor_max_steps', r.supervisor_max_steps,
               'specialist_max_steps', r.specialist_max_steps, 'max_concurrent_tool_calls', r.max_concurrent_tool_calls,
               'max_processor_retries', r.max_processor_retries, 'final_response_feedback', r.final_response_feedback,
               'delegation_context_max_chars', r.delegation_context_max_chars,
               'delegation_result_max_chars', r.delegation_result_max_chars,
               'delegation_failure_text', r.delegation_failure_text,
               'delegation_truncation_text', r.delegation_truncation_text,
               'command_timeout_ms', r.command_timeout_ms,
               'continue_on_disconnect', r.continue_on_disconnect
           )
           FROM popagent_agent_runtime_settings r WHERE r.id = 1
       )::text AS runtime,
       (
           SELECT jsonb_agg(jsonb_build_object(
               'id', a.id, 'display_name', a.display_name, 'description', a.description,
               'instructions', a.instructions, 'delegation_eligible', a.delegation_eligible, 'tools', a.tools,
               'model', a.model, 'workspace_access', a.workspace_access, 'browser_access', a.browser_access,
               'tool_approval', a.tool_approval,
               -- Only enabled skills ever reach a run (AgentProfile.skills).
               'skills', (
                   SELECT coalesce(jsonb_agg(jsonb_build_object(
                       'name', k.name, 'description', k.description, 'instructions', k.instructions,
                       'references', k.named_references
                   ) ORDER BY k.name), '[]'::jsonb)
                   FROM popagent_agent_skills k WHERE k.agent_id = a.id AND k.enabled
               )
           ) ORDER BY a.position)
           FROM popagent_agents a
       )::text AS agents,
       thread.messages, thread.last_seq, thread.retried_seq IS NOT NULL AS retried,
       CASE WHEN thread.retried_seq IS NULL AND thread.messages = $5 AND thread.last_seq = $6 THEN NULL ELSE (
           SELECT coalesce(jsonb_agg(e.message ORDER BY m.seq, e.ord), '[]'::jsonb)
           FROM popagent_thread_messages m
           CROSS JOIN LATERAL jsonb_array_elements(m.content -> 'model') WITH ORDINALITY AS e(message, ord)
           WHERE m.thread_id = s.id AND m.seq < coalesce(thread.retried_seq, 9223372036854775807)
       )::text END AS history,
       (SELECT settings FROM memory)::text AS memory_settings,
       (SELECT state FROM cursor)::text AS observation_state,
       (
           SELECT coalesce(jsonb_agg(jsonb_build_object(
               'seq', e.seq, 'kind', e.kind, 'content', e.content, 'tokens', e.tokens,
               'first_message_seq', e.first_message_seq, 'last_message_seq', e.last_message_seq,
               'message_tokens', e.message_tokens, 'active', e.active, 'created_at', e.created_at
           ) ORDER BY e.active DESC, e.seq), '[]'::jsonb)
           FROM popagent_observations e
           WHERE e.thread_id = $1 AND e.generation = coalesce((SELECT generation FROM cursor), 0)
       )::text AS observation_log,
       (
           SELECT coalesce(jsonb_agg(jsonb_build_object(
               'seq', m.seq, 'id', m.id, 'role', m.role, 'created_at', m.created_at, 'tokens', m.tokens,
               'models', coalesce(jsonb_array_length(m.content -> 'model'), 0)
           ) ORDER BY m.seq), '[]'::jsonb)
           FROM popagent_thread_messages m
           WHERE m.thread_id = $1 AND m.seq < coalesce(thread.retried_seq, 9223372036854775807)
             AND m.seq > CASE WHEN (SELECT enabled FROM memory) THEN coalesce((SELECT observed_seq FROM cursor), 0)
                         ELSE 0 END
       )::text AS raw_rows
FROM popagent_sessions s, thread
WHERE s.id = $1 AND s.deleting_at IS NULL

-- name: lock_session_for_turn
-- Held until the turn's messages commit: a permanent deletion (which marks, then removes
-- the row) waits for it, so a turn never re-creates the thread of a deleted session.
SELECT id FROM popagent_sessions WHERE id = $1 AND deleting_at IS NULL FOR KEY SHARE

-- Threads ---------------------------------------------------------------------------

-- name: thread_version_and_seq
-- The thread's version (message count, last seq) and the seq of message $2 if it is stored.
SELECT count(*) AS messages, coalesce(max(seq), 0) AS last_seq, max(seq) FILTER (WHERE id = $2) AS message_seq
FROM popagent_thread_messages WHERE thread_id = $1

-- name: insert_thread_messages
-- A turn's messages, in order, each deduplicated by id, with their token counts ($5, NULL: counted
-- when first read); returns the seqs of those stored now.
INSERT INTO popagent_thread_messages (thread_id, id, role, content, tokens)
SELECT $1, m.id, m.role, m.content::jsonb, m.tokens
FROM unnest($2::text[], $3::text[], $4::text[], $5::integer[]) WITH ORDINALITY AS m(id, role, content, tokens, position)
ORDER BY m.position
ON CONFLICT (thread_id, id) DO NOTHING
RETURNING seq

-- name: upsert_thread
INSERT INTO popagent_threads (id, resource_id, parent_id)
VALUES ($1, $2, $3)
ON CONFLICT (id) DO UPDATE SET updated_at = now()

-- name: delete_thread_messages_after
-- A retried prompt replaces what answered it before (the AI SDK's regenerate).
DELETE FROM popagent_thread_messages WHERE thread_id = $1 AND seq > $2

-- name: thread_messages
SELECT id, role, content::text AS content FROM popagent_thread_messages WHERE thread_id = $1 ORDER BY seq

-- Sessions as a turn records itself in them ---------------------------------------

-- name: session_messages_for_turn
-- The session's UI messages, locked until the turn's write commits (a permanent deletion,
-- which marks, then removes the row, waits for it). No row: no such (live) session.
SELECT messages::text AS messages FROM popagent_sessions WHERE id = $1 AND deleting_at IS NULL FOR UPDATE

-- name: store_session_messages
-- The turn's own write of the session's UI messages: a new revision, so a client's save
-- from before it gets the server copy (with the same message ids) instead of overwriting it.
UPDATE popagent_sessions
SET messages = $2::jsonb, message_count = $3, revision = revision + 1, updated_at = now()
WHERE id = $1

-- name: begin_fresh_turn
-- `begin_turn` in one round trip, for a prompt that neither the session's UI messages nor the
-- thread hold yet: the user UI message $3 and the placeholder $4 appended to the session's list
-- (a new revision), the thread (resource $2) created if needed, and its rows (ids $5, roles $6,
-- contents $7) stored; the thread's version after it. No row: the session is gone or holds one of
-- the ids already (a retried prompt), and nothing was written.
WITH session AS (
    UPDATE popagent_sessions s
    SET messages = s.messages || jsonb_build_array($3::jsonb, $4::jsonb),
        message_count = jsonb_array_length(s.messages) + 2, revision = s.revision + 1, updated_at = now()
    WHERE s.id = $1 AND s.deleting_at IS NULL
      AND NOT EXISTS (
          SELECT 1 FROM jsonb_array_elements(s.messages) AS m(message) WHERE m.message ->> 'id' = ANY ($5::text[])
      )
      AND NOT EXISTS (SELECT 1 FROM popagent_thread_messages t WHERE t.thread_id = $1 AND t.id = ANY ($5::text[]))
    RETURNING s.id
),
thread AS (
    INSERT INTO popagent_threads (id, resource_id, parent_id)
    SELECT id, $2, NULL FROM session
    ON CONFLICT (id) DO UPDATE SET updated_at = now()
    RETURNING id
),
stored AS (
    INSERT INTO popagent_thread_messages (thread_id, id, role, content)
    SELECT thread.id, m.id, m.role, m.content::jsonb
    FROM thread, unnest($5::text[], $6::text[], $7::text[]) WITH ORDINALITY AS m(id, role, content, position)
    ORDER BY m.position
    ON CONFLICT (thread_id, id) DO NOTHING
    RETURNING seq
),
before AS (
    SELECT count(*) AS messages, coalesce(max(seq), 0) AS last_seq FROM popagent_thread_messages WHERE thread_id = $1
)
SELECT before.messages + (SELECT count(*) FROM stored) AS messages,
       greatest(before.last_seq, (SELECT coalesce(max(seq), 0) FROM stored)) AS last_seq
FROM before
WHERE EXISTS (SELECT 1 FROM session)

-- name: replace_thread_message
-- The user message stored before the model call, replaced by the request the model was sent, with
-- its token count ($4, NULL: counted when first read).
UPDATE popagent_thread_messages SET content = $3::jsonb, tokens = $4 WHERE thread_id = $1 AND id = $2

-- name: session_double_texting
-- The session's double-texting policy, read only when a turn is already running on it.
SELECT double_texting FROM popagent_sessions WHERE id = $1 AND deleting_at IS NULL

-- name: drop_turn_from_session
-- A rolled-back turn ('rollback' double texting): the session's UI messages from its prompt ($2) on
-- are dropped (a new revision). No row: the prompt was never stored, nothing changed.
WITH found AS (
    SELECT min(m.position) AS position
    FROM popagent_sessions s, jsonb_array_elements(s.messages) WITH ORDINALITY AS m(message, position)
    WHERE s.id = $1 AND m.message ->> 'id' = $2
),
kept AS (
    SELECT coalesce(jsonb_agg(m.message ORDER BY m.position), '[]'::jsonb) AS messages
    FROM popagent_sessions s, found, jsonb_array_elements(s.messages) WITH ORDINALITY AS m(message, position)
    WHERE s.id = $1 AND m.position < found.position
)
UPDATE popagent_sessions s
SET messages = kept.messages, message_count = jsonb_array_length(kept.messages), revision = s.revision + 1,
    updated_at = now()
FROM kept, found
WHERE s.id = $1 AND found.position IS NOT NULL
RETURNING s.id

-- name: drop_turn_from_thread
-- The rolled-back turn's rows in the thread: its prompt ($2) and everything after it.
DELETE FROM popagent_thread_messages
WHERE thread_id = $1 AND seq >= (SELECT seq FROM popagent_thread_messages WHERE thread_id = $1 AND id = $2)

-- name: turn_still_held
-- A chat turn's commit goes through only while its record is this runner's and running (a runner
-- whose turn another took over stores nothing); the row stays locked until the commit.
SELECT true FROM popagent_turns WHERE id = $1 AND runner_id = $2 AND status = 'running' FOR UPDATE

-- Versions of an edited user message --------------------------------------------------------

-- name: thread_rows_from
-- The thread's rows from message $2 on (none when it is not stored), oldest first.
SELECT id, role, content::text AS content, tokens
FROM popagent_thread_messages
WHERE thread_id = $1 AND seq >= (SELECT seq FROM popagent_thread_messages WHERE thread_id = $1 AND id = $2)
ORDER BY seq

-- name: keep_shown_version
-- The branch of message $2 shown until now ($3 UI messages, $4 thread rows) is kept; its number
-- (no row: the message had no versions yet).
UPDATE popagent_message_versions SET ui_messages = $3::jsonb, thread_rows = $4::jsonb
WHERE session_id = $1 AND message_id = $2 AND ui_messages IS NULL
RETURNING version

-- name: keep_first_version
-- The branch of message $2 before its first edit, kept as version 1.
INSERT INTO popagent_message_versions (session_id, message_id, version, ui_messages, thread_rows)
VALUES ($1, $2, 1, $3::jsonb, $4::jsonb)

-- name: add_shown_version
-- The edit of message $2: its next version, the one shown. Its number.
INSERT INTO popagent_message_versions (session_id, message_id, version)
SELECT $1, $2, max(version) + 1 FROM popagent_message_versions WHERE session_id = $1 AND message_id = $2
RETURNING version

-- name: message_versions
-- Each message of session $1 with versions: how many, and which is shown.
SELECT message_id, count(*)::integer AS versions, max(version) FILTER (WHERE ui_messages IS NULL) AS shown
FROM popagent_message_versions WHERE session_id = $1
GROUP BY message_id

-- name: message_version
-- Version $3 of message $2: its stored branch (NULL while it is the one shown). No row: no such version.
SELECT ui_messages::text AS ui_messages, thread_rows::text AS thread_rows
FROM popagent_message_versions WHERE session_id = $1 AND message_id = $2 AND version = $3

-- name: show_message_version
-- Version $3 of message $2 becomes the shown one (after keep_shown_version kept the other).
UPDATE popagent_message_versions SET ui_messages = NULL, thread_rows = NULL
WHERE session_id = $1 AND message_id = $2 AND version = $3

-- name: delete_thread_messages_from
-- The thread's rows from seq $2 on (a branch switched away from).
DELETE FROM popagent_thread_messages WHERE thread_id = $1 AND seq >= $2

-- name: session_turn_in_progress
-- Whether a turn runs or waits on the session (a branch switch waits for none).
SELECT EXISTS (SELECT 1 FROM popagent_turns WHERE session_id = $1 AND status IN ('queued', 'running'))
