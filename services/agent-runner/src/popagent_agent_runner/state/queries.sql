-- Sessions --------------------------------------------------------------------------

-- name: list_sessions
-- Chat sessions: a background task's own thread (task_id set) is no chat session.
SELECT id, title, title_locked, workspace_id, revision, archived_at, created_at, updated_at, message_count, double_texting
FROM popagent_sessions
WHERE deleting_at IS NULL
  AND task_id IS NULL
  AND (archived_at IS NOT NULL) = $1
  AND ($2::text = '' OR workspace_id = $2)
ORDER BY updated_at DESC, id
LIMIT $3

-- name: search_messages
-- The chat messages matching a web-search-style query ($1: words, "phrases", -excluded, or), best
-- first, at most $2, each with a short excerpt marking the matches. It reads the messages' own
-- full-text column (`search`, migration 0121, which `recall` reads too: English stemming, so
-- "zebras" finds "zebra"). Only chat sessions' threads (not a task's, not a specialist's),
-- archived ones included.
SELECT s.id AS session_id, s.title, s.archived_at, s.updated_at, m.id AS message_id, m.role, m.created_at,
       ts_headline(
           'english',
           (SELECT coalesce(string_agg(part #>> '{}', ' '), '')
            FROM jsonb_path_query(m.content, '$.ui.parts[*] ? (@.type == "text").text') AS part),
           q.query,
           'MaxFragments=1, MaxWords=24, MinWords=8, StartSel=<<, StopSel=>>'
       ) AS excerpt
FROM websearch_to_tsquery('english', $1) AS q(query)
JOIN popagent_thread_messages AS m ON m.search @@ q.query
JOIN popagent_sessions AS s ON s.id = m.thread_id AND s.deleting_at IS NULL AND s.task_id IS NULL
ORDER BY ts_rank(m.search, q.query) DESC, m.created_at DESC
LIMIT $2

-- name: create_session
INSERT INTO popagent_sessions (id, title, workspace_id, task_id)
VALUES ($1, $2, $3, $4)
ON CONFLICT (id) DO NOTHING
RETURNING id, title, title_locked, workspace_id, revision, archived_at, created_at, updated_at, message_count, double_texting

-- name: get_session
SELECT id, title, title_locked, workspace_id, revision, archived_at, created_at, updated_at, message_count, double_texting,
       messages::text AS messages
FROM popagent_sessions
WHERE id = $1 AND deleting_at IS NULL

-- name: save_session
-- The optimistic lock: one statement checks and increments the revision. Concurrent
-- saves with the same revision queue on the row lock; PostgreSQL re-checks the WHERE
-- against the committed row, so exactly one of them matches.
UPDATE popagent_sessions
SET messages = $3::jsonb,
    message_count = $4,
    title = CASE WHEN title_locked OR $5::text IS NULL THEN title ELSE $5 END,
    revision = revision + 1,
    updated_at = now()
WHERE id = $1 AND revision = $2 AND deleting_at IS NULL
RETURNING id, title, title_locked, workspace_id, revision, archived_at, created_at, updated_at, message_count, double_texting

-- name: update_session
-- A rename locks the title so later message saves keep it; archive is display state only.
UPDATE popagent_sessions
SET title = coalesce($2::text, title),
    title_locked = title_locked OR $2::text IS NOT NULL,
    archived_at = CASE
        WHEN $3::boolean IS NULL THEN archived_at
        WHEN $3::boolean THEN coalesce(archived_at, now())
        ELSE NULL
    END,
    double_texting = coalesce($4::text, double_texting),
    updated_at = now()
WHERE id = $1 AND deleting_at IS NULL
RETURNING id, title, title_locked, workspace_id, revision, archived_at, created_at, updated_at, message_count, double_texting

-- name: mark_session_deleting
-- First step of permanent deletion: from here on the session is invisible everywhere
-- but DeleteSession, which may run (again) until the row is gone.
UPDATE popagent_sessions
SET deleting_at = coalesce(deleting_at, now())
WHERE id = $1
RETURNING workspace_id, title

-- name: delete_thread
-- Messages, observational-memory state and every other per-thread artifact cascade.
DELETE FROM popagent_threads WHERE id = $1

-- name: delete_session_turns
-- The session's turn records (popagent_turns; no foreign key, see its migration).
DELETE FROM popagent_turns WHERE session_id = $1

-- name: delete_session_approvals
DELETE FROM popagent_approvals WHERE session_id = $1

-- name: delete_session_grants
DELETE FROM popagent_approval_grants WHERE session_id = $1

-- name: delete_session_row
DELETE FROM popagent_sessions WHERE id = $1 AND deleting_at IS NOT NULL

-- name: workspace_session_ids
SELECT id FROM popagent_sessions WHERE workspace_id = $1 ORDER BY created_at, id

-- name: sessions_pending_deletion
SELECT id FROM popagent_sessions
WHERE deleting_at IS NOT NULL AND deleting_at < now() - make_interval(secs => $1)
ORDER BY deleting_at
LIMIT 100

-- Workspaces ------------------------------------------------------------------------

-- name: list_workspaces
SELECT id, name, path, description, created_at, updated_at
FROM popagent_agent_workspaces
ORDER BY id = 'popagent' DESC, name, id

-- name: get_workspace
SELECT id, name, path, description, created_at, updated_at
FROM popagent_agent_workspaces WHERE id = $1

-- name: lock_workspace
SELECT id, name, path, description, created_at, updated_at
FROM popagent_agent_workspaces WHERE id = $1 FOR UPDATE

-- name: lock_workspace_registrations
-- Registrations and path changes one at a time (each checks the others' folders for nesting);
-- nothing else waits on it. Held to the end of the transaction.
SELECT pg_advisory_xact_lock(hashtext('popagent.workspace-registrations'))

-- name: create_workspace
INSERT INTO popagent_agent_workspaces (id, name, path, description)
VALUES ($1, $2, $3, $4)
ON CONFLICT (id) DO NOTHING
RETURNING id, name, path, description, created_at, updated_at

-- name: update_workspace
UPDATE popagent_agent_workspaces
SET name = $2, path = $3, description = $4, updated_at = now()
WHERE id = $1
RETURNING id, name, path, description, created_at, updated_at

-- name: count_workspace_sessions
SELECT count(*) FROM popagent_sessions WHERE workspace_id = $1

-- name: delete_workspace
DELETE FROM popagent_agent_workspaces WHERE id = $1

-- Agents ----------------------------------------------------------------------------

-- name: list_agents
SELECT id, display_name, description, instructions, source_url, workspace_access, browser_access,
       delegation_eligible, tools, model, tool_approval::text, updated_at
FROM popagent_agents
ORDER BY position, id

-- name: lock_agent
SELECT id, display_name, description, instructions, source_url, workspace_access, browser_access,
       delegation_eligible, tools, model, tool_approval::text, updated_at
FROM popagent_agents WHERE id = $1 FOR UPDATE

-- name: update_agent
UPDATE popagent_agents
SET display_name = $2, description = $3, instructions = $4, source_url = $5, workspace_access = $6,
    browser_access = $7, delegation_eligible = $8, tools = $9, model = $10, tool_approval = $11::jsonb,
    updated_at = now()
WHERE id = $1
RETURNING id, display_name, description, instructions, source_url, workspace_access, browser_access,
          delegation_eligible, tools, model, tool_approval::text, updated_at

-- Settings singletons ---------------------------------------------------------------
-- Each names its table's columns in the order of its rules (settings_rules), then updated_at.

-- name: get_agent_runtime_settings
SELECT default_model, supervisor_max_steps, specialist_max_steps, max_concurrent_tool_calls, max_processor_retries,
       final_response_feedback, delegation_context_max_chars, delegation_result_max_chars, delegation_failure_text,
       delegation_truncation_text, task_concurrency, task_poll_interval_ms, task_heartbeat_interval_ms,
       task_heartbeat_timeout_ms, task_attempt_timeout_ms, task_abort_ack_timeout_ms, task_retry_base_ms,
       task_retry_cap_ms, command_timeout_ms, continue_on_disconnect, updated_at
FROM popagent_agent_runtime_settings WHERE id = 1

-- name: lock_agent_runtime_settings
SELECT default_model, supervisor_max_steps, specialist_max_steps, max_concurrent_tool_calls, max_processor_retries,
       final_response_feedback, delegation_context_max_chars, delegation_result_max_chars, delegation_failure_text,
       delegation_truncation_text, task_concurrency, task_poll_interval_ms, task_heartbeat_interval_ms,
       task_heartbeat_timeout_ms, task_attempt_timeout_ms, task_abort_ack_timeout_ms, task_retry_base_ms,
       task_retry_cap_ms, command_timeout_ms, continue_on_disconnect, updated_at
FROM popagent_agent_runtime_settings WHERE id = 1 FOR UPDATE

-- name: update_agent_runtime_settings
UPDATE popagent_agent_runtime_settings
SET default_model = $1, supervisor_max_steps = $2, specialist_max_steps = $3, max_concurrent_tool_calls = $4,
    max_processor_retries = $5, final_response_feedback = $6, delegation_context_max_chars = $7,
    delegation_result_max_chars = $8, delegation_failure_text = $9, delegation_truncation_text = $10,
    task_concurrency = $11, task_poll_interval_ms = $12, task_heartbeat_interval_ms = $13,
    task_heartbeat_timeout_ms = $14, task_attempt_timeout_ms = $15, task_abort_ack_timeout_ms = $16,
    task_retry_base_ms = $17, task_retry_cap_ms = $18, command_timeout_ms = $19, continue_on_disconnect = $20,
    updated_at = now()
WHERE id = 1
RETURNING default_model, supervisor_max_steps, specialist_max_steps, max_concurrent_tool_calls, max_processor_retries,
          final_response_feedback, delegation_context_max_chars, delegation_result_max_chars, delegation_failure_text,
          delegation_truncation_text, task_concurrency, task_poll_interval_ms, task_heartbeat_interval_ms,
          task_heartbeat_timeout_ms, task_attempt_timeout_ms, task_abort_ack_timeout_ms, task_retry_base_ms,
          task_retry_cap_ms, command_timeout_ms, continue_on_disconnect, updated_at

-- name: get_memory_settings
SELECT enabled, observation_message_tokens, reflection_observation_tokens, raw_history_retention_messages,
       async_observation_enabled, observation_buffer_activation, observation_block_after, async_reflection_enabled,
       reflection_buffer_activation, reflection_block_after, idle_activation_seconds, activate_on_provider_change,
       shared_budget, previous_observation_max_tokens, temporal_markers, forward_attachments, retrieval_scope,
       observer_instructions, reflector_instructions, updated_at
FROM popagent_memory_settings WHERE id = 1

-- name: lock_memory_settings
SELECT enabled, observation_message_tokens, reflection_observation_tokens, raw_history_retention_messages,
       async_observation_enabled, observation_buffer_activation, observation_block_after, async_reflection_enabled,
       reflection_buffer_activation, reflection_block_after, idle_activation_seconds, activate_on_provider_change,
       shared_budget, previous_observation_max_tokens, temporal_markers, forward_attachments, retrieval_scope,
       observer_instructions, reflector_instructions, updated_at
FROM popagent_memory_settings WHERE id = 1 FOR UPDATE

-- name: update_memory_settings
UPDATE popagent_memory_settings
SET enabled = $1, observation_message_tokens = $2, reflection_observation_tokens = $3,
    raw_history_retention_messages = $4, async_observation_enabled = $5, observation_buffer_activation = $6,
    observation_block_after = $7, async_reflection_enabled = $8, reflection_buffer_activation = $9,
    reflection_block_after = $10, idle_activation_seconds = $11, activate_on_provider_change = $12,
    shared_budget = $13, previous_observation_max_tokens = $14, temporal_markers = $15,
    forward_attachments = $16, retrieval_scope = $17, observer_instructions = $18,
    reflector_instructions = $19, updated_at = now()
WHERE id = 1
RETURNING enabled, observation_message_tokens, reflection_observation_tokens, raw_history_retention_messages,
          async_observation_enabled, observation_buffer_activation, observation_block_after, async_reflection_enabled,
          reflection_buffer_activation, reflection_block_after, idle_activation_seconds, activate_on_provider_change,
          shared_budget, previous_observation_max_tokens, temporal_markers, forward_attachments, retrieval_scope,
          observer_instructions, reflector_instructions, updated_at

-- Agent Skills ------------------------------------------------------------------------

-- name: agent_exists
SELECT id FROM popagent_agents WHERE id = $1

-- name: lock_agent_for_skills
-- Serializes skill creation per agent, so the per-agent bound holds under concurrent creates.
SELECT id FROM popagent_agents WHERE id = $1 FOR UPDATE

-- name: count_agent_skills
SELECT count(*) FROM popagent_agent_skills WHERE agent_id = $1

-- name: list_agent_skills
SELECT id, agent_id, name, description, instructions, named_references::text AS named_references, source_url,
       attribution, license, compatibility, metadata::text AS metadata, enabled, created_at, updated_at
FROM popagent_agent_skills WHERE agent_id = $1
ORDER BY name

-- name: lock_agent_skill
SELECT id, agent_id, name, description, instructions, named_references::text AS named_references, source_url,
       attribution, license, compatibility, metadata::text AS metadata, enabled, created_at, updated_at
FROM popagent_agent_skills WHERE agent_id = $1 AND id = $2 FOR UPDATE

-- name: insert_agent_skill
INSERT INTO popagent_agent_skills (
    id, agent_id, name, description, instructions, named_references, source_url, attribution, license,
    compatibility, metadata, enabled
) VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8, $9, $10, $11::jsonb, $12)
RETURNING id, agent_id, name, description, instructions, named_references::text AS named_references, source_url,
          attribution, license, compatibility, metadata::text AS metadata, enabled, created_at, updated_at

-- name: update_agent_skill
UPDATE popagent_agent_skills
SET name = $3, description = $4, instructions = $5, named_references = $6::jsonb, source_url = $7,
    attribution = $8, license = $9, compatibility = $10, metadata = $11::jsonb, enabled = $12, updated_at = now()
WHERE id = $1 AND agent_id = $2
RETURNING id, agent_id, name, description, instructions, named_references::text AS named_references, source_url,
          attribution, license, compatibility, metadata::text AS metadata, enabled, created_at, updated_at

-- name: delete_agent_skill
DELETE FROM popagent_agent_skills WHERE agent_id = $1 AND id = $2 RETURNING id
