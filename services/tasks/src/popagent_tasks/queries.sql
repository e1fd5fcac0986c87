-- Every statement of the tasks service. Transitions of a claimed attempt are fenced by
-- (id, attempt_count, live status): a worker whose claim was recovered and re-claimed
-- by someone else updates nothing.
--
-- A statement that hands out tasks names the columns of `popagent_tasks.model.Task`, one
-- that hands out schedules those of `Schedule`, in this order (repo.py maps them once).

-- name: insert_task
INSERT INTO popagent_agent_tasks (kind, status, source, workspace_id, prompt, model, session_id, max_attempts)
VALUES ('task', 'queued', $1, $2, $3, $4, $5, $6)
RETURNING id, kind, status, source, workspace_id, prompt, model, session_id, schedule_id, tick, parent_task_id,
    attempt_count, max_attempts, next_attempt_at, claimed_by, turn_id, trace_id, started_at, heartbeat_at,
    finished_at, last_error_class, last_error, dead_lettered_at, outcome, resolution, resolved_at,
    cancel_requested_at, created_at, updated_at, approval_wait_id, approval_wait_tool, approval_wait_since

-- name: insert_tasks
INSERT INTO popagent_agent_tasks (kind, status, source, workspace_id, prompt, model, session_id, max_attempts)
SELECT 'task', 'queued', $1, $2, prompt, $3, '', $4 FROM unnest($5::text[]) AS prompt
RETURNING id

-- name: get_task
SELECT id, kind, status, source, workspace_id, prompt, model, session_id, schedule_id, tick, parent_task_id,
    attempt_count, max_attempts, next_attempt_at, claimed_by, turn_id, trace_id, started_at, heartbeat_at,
    finished_at, last_error_class, last_error, dead_lettered_at, outcome, resolution, resolved_at,
    cancel_requested_at, created_at, updated_at, approval_wait_id, approval_wait_tool, approval_wait_since
FROM popagent_agent_tasks WHERE id = $1

-- name: list_tasks
SELECT id, kind, status, source, workspace_id, prompt, model, session_id, schedule_id, tick, parent_task_id,
    attempt_count, max_attempts, next_attempt_at, claimed_by, turn_id, trace_id, started_at, heartbeat_at,
    finished_at, last_error_class, last_error, dead_lettered_at, outcome, resolution, resolved_at,
    cancel_requested_at, created_at, updated_at, approval_wait_id, approval_wait_tool, approval_wait_since
FROM popagent_agent_tasks
WHERE ($2::text = '' OR workspace_id = $2) AND ($3::text = '' OR status = $3)
ORDER BY created_at DESC, id
LIMIT $1

-- name: recent_progress
SELECT task_id, attempt, kind, message, created_at FROM (
    SELECT p.id, p.task_id, p.attempt, p.kind, p.message, p.created_at,
           row_number() OVER (PARTITION BY p.task_id ORDER BY p.id DESC) AS recency
    FROM popagent_agent_task_progress p
    WHERE p.task_id = ANY ($1::uuid[])
) recent
WHERE recency <= $2
ORDER BY task_id, id

-- name: insert_progress
INSERT INTO popagent_agent_task_progress (task_id, attempt, kind, message)
SELECT task_id, attempt, kind, message
FROM unnest($1::uuid[], $2::int[], $3::text[], $4::text[]) AS entry (task_id, attempt, kind, message)

-- name: insert_attempt_progress
-- Executor-reported progress: only while the attempt still owns the task.
INSERT INTO popagent_agent_task_progress (task_id, attempt, kind, message)
SELECT id, attempt_count, $3, $4 FROM popagent_agent_tasks
WHERE id = $1 AND attempt_count = $2 AND status IN ('running', 'cancelling')
RETURNING id

-- name: attempt_approval_wait
-- The approval the attempt's turn waits for ($3 id, $4 tool, $5 since; all NULL: none), only while
-- the attempt still owns the task.
UPDATE popagent_agent_tasks SET
    approval_wait_id = $3,
    approval_wait_tool = $4,
    approval_wait_since = $5,
    updated_at = clock_timestamp()
WHERE id = $1 AND attempt_count = $2 AND status IN ('running', 'cancelling')
RETURNING id

-- name: cancel_task
-- Queued work is cancelled at once; running work only asks its executor to stop.
UPDATE popagent_agent_tasks SET
    status = CASE WHEN status = 'queued' THEN 'cancelled' ELSE 'cancelling' END,
    finished_at = CASE WHEN status = 'queued' THEN clock_timestamp() ELSE finished_at END,
    cancel_requested_at = clock_timestamp(),
    updated_at = clock_timestamp()
WHERE id = $1 AND status IN ('queued', 'running')
RETURNING id, kind, status, source, workspace_id, prompt, model, session_id, schedule_id, tick, parent_task_id,
    attempt_count, max_attempts, next_attempt_at, claimed_by, turn_id, trace_id, started_at, heartbeat_at,
    finished_at, last_error_class, last_error, dead_lettered_at, outcome, resolution, resolved_at,
    cancel_requested_at, created_at, updated_at, approval_wait_id, approval_wait_tool, approval_wait_since

-- name: resolve_task
UPDATE popagent_agent_tasks SET
    status = 'completed',
    resolution = $2,
    resolved_at = clock_timestamp(),
    last_error_class = NULL,
    last_error = NULL,
    dead_lettered_at = NULL,
    next_attempt_at = NULL,
    cancel_requested_at = NULL,
    updated_at = clock_timestamp()
WHERE id = $1 AND status IN ('failed', 'cancelled', 'dead-letter')
RETURNING id, kind, status, source, workspace_id, prompt, model, session_id, schedule_id, tick, parent_task_id,
    attempt_count, max_attempts, next_attempt_at, claimed_by, turn_id, trace_id, started_at, heartbeat_at,
    finished_at, last_error_class, last_error, dead_lettered_at, outcome, resolution, resolved_at,
    cancel_requested_at, created_at, updated_at, approval_wait_id, approval_wait_tool, approval_wait_since

-- name: delete_task
DELETE FROM popagent_agent_tasks
WHERE id = $1 AND status IN ('completed', 'failed', 'cancelled', 'dead-letter')
RETURNING id

-- name: claim_tasks
-- One statement claims and marks: SKIP LOCKED hands each due row to one worker, and the
-- attempt number it increments becomes that attempt's fencing token.
WITH candidate AS (
    SELECT id FROM popagent_agent_tasks
    WHERE status = 'queued' AND next_attempt_at <= clock_timestamp()
      AND attempt_count - uncounted_attempts < max_attempts
    ORDER BY next_attempt_at, id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
UPDATE popagent_agent_tasks t SET
    status = 'running',
    attempt_count = t.attempt_count + 1,
    claimed_by = $1,
    turn_id = gen_random_uuid(),
    trace_id = replace(gen_random_uuid()::text, '-', ''),
    started_at = clock_timestamp(),
    heartbeat_at = clock_timestamp(),
    finished_at = NULL,
    updated_at = clock_timestamp()
FROM candidate
WHERE t.id = candidate.id
RETURNING t.id, t.kind, t.status, t.source, t.workspace_id, t.prompt, t.model, t.session_id, t.schedule_id,
    t.tick, t.parent_task_id, t.attempt_count, t.max_attempts, t.next_attempt_at, t.claimed_by,
    t.turn_id, t.trace_id, t.started_at, t.heartbeat_at, t.finished_at, t.last_error_class,
    t.last_error, t.dead_lettered_at, t.outcome, t.resolution, t.resolved_at, t.cancel_requested_at,
    t.created_at, t.updated_at, t.approval_wait_id, t.approval_wait_tool, t.approval_wait_since

-- name: heartbeat
-- Returns the attempts this worker still owns, with their status: a missing one was
-- recovered by someone else (abort it), a `cancelling` one was asked to stop.
UPDATE popagent_agent_tasks t SET heartbeat_at = clock_timestamp()
FROM unnest($1::uuid[], $2::int[]) AS held (id, attempt)
WHERE t.id = held.id AND t.attempt_count = held.attempt AND t.status IN ('running', 'cancelling')
RETURNING t.id, t.status

-- name: complete_attempts
-- A completion that races a cancel request ends cancelled: once asked, the only exit is cancelled.
UPDATE popagent_agent_tasks t SET
    approval_wait_id = NULL,
    approval_wait_tool = NULL,
    approval_wait_since = NULL,
    status = CASE WHEN t.status = 'cancelling' THEN 'cancelled' ELSE 'completed' END,
    outcome = done.outcome,
    finished_at = clock_timestamp(),
    updated_at = clock_timestamp()
FROM unnest($1::uuid[], $2::int[], $3::text[]) AS done (id, attempt, outcome)
WHERE t.id = done.id AND t.attempt_count = done.attempt AND t.status IN ('running', 'cancelling')
RETURNING t.id, t.kind, t.status, t.source, t.workspace_id, t.prompt, t.model, t.session_id, t.schedule_id,
    t.tick, t.parent_task_id, t.attempt_count, t.max_attempts, t.next_attempt_at, t.claimed_by,
    t.turn_id, t.trace_id, t.started_at, t.heartbeat_at, t.finished_at, t.last_error_class,
    t.last_error, t.dead_lettered_at, t.outcome, t.resolution, t.resolved_at, t.cancel_requested_at,
    t.created_at, t.updated_at, t.approval_wait_id, t.approval_wait_tool, t.approval_wait_since

-- name: fail_attempt
-- $3 error class, $4 message, $5 retry-eligible (self-update and a transient class),
-- $6 backoff in seconds. Exhausted retry-eligible work is dead-lettered.
WITH decided AS (
    SELECT id, CASE
        WHEN status = 'cancelling' THEN 'cancelled'
        WHEN $5::boolean AND attempt_count - uncounted_attempts < max_attempts THEN 'queued'
        WHEN $5::boolean THEN 'dead-letter'
        ELSE 'failed'
    END AS next_status
    FROM popagent_agent_tasks
    WHERE id = $1 AND attempt_count = $2 AND status IN ('running', 'cancelling')
    FOR UPDATE
)
UPDATE popagent_agent_tasks t SET
    approval_wait_id = NULL,
    approval_wait_tool = NULL,
    approval_wait_since = NULL,
    status = decided.next_status,
    next_attempt_at = CASE WHEN decided.next_status = 'queued'
        THEN clock_timestamp() + make_interval(secs => $6::double precision) ELSE t.next_attempt_at END,
    dead_lettered_at = CASE WHEN decided.next_status = 'dead-letter' THEN clock_timestamp() END,
    last_error_class = $3,
    last_error = $4,
    finished_at = clock_timestamp(),
    updated_at = clock_timestamp()
FROM decided
WHERE t.id = decided.id
RETURNING t.id, t.kind, t.status, t.source, t.workspace_id, t.prompt, t.model, t.session_id, t.schedule_id,
    t.tick, t.parent_task_id, t.attempt_count, t.max_attempts, t.next_attempt_at, t.claimed_by,
    t.turn_id, t.trace_id, t.started_at, t.heartbeat_at, t.finished_at, t.last_error_class,
    t.last_error, t.dead_lettered_at, t.outcome, t.resolution, t.resolved_at, t.cancel_requested_at,
    t.created_at, t.updated_at, t.approval_wait_id, t.approval_wait_tool, t.approval_wait_since

-- name: settle_cancelled
UPDATE popagent_agent_tasks SET
    approval_wait_id = NULL,
    approval_wait_tool = NULL,
    approval_wait_since = NULL,
    status = 'cancelled',
    finished_at = clock_timestamp(),
    updated_at = clock_timestamp()
WHERE id = $1 AND attempt_count = $2 AND status IN ('running', 'cancelling')
RETURNING id, kind, status, source, workspace_id, prompt, model, session_id, schedule_id, tick, parent_task_id,
    attempt_count, max_attempts, next_attempt_at, claimed_by, turn_id, trace_id, started_at, heartbeat_at,
    finished_at, last_error_class, last_error, dead_lettered_at, outcome, resolution, resolved_at,
    cancel_requested_at, created_at, updated_at, approval_wait_id, approval_wait_tool, approval_wait_since

-- name: release_attempts
-- The attempt did not fail, it was interrupted: the worker or agent-runner shut down, the
-- service cancelled it, or the database was unreachable when its result was saved. It goes
-- back to the queue after $6 s while attempts remain (the recovery rule), so nothing such an
-- event interrupts is lost. $3 false: a shutdown, which does not count against max_attempts.
-- $4 error class, $5 message.
WITH decided AS (
    SELECT t.id, CASE
        WHEN t.status = 'cancelling' THEN 'cancelled'
        WHEN NOT $3::boolean OR t.attempt_count - t.uncounted_attempts < t.max_attempts THEN 'queued'
        ELSE 'dead-letter'
    END AS next_status
    FROM popagent_agent_tasks t
    JOIN unnest($1::uuid[], $2::int[]) AS held (id, attempt) ON t.id = held.id AND t.attempt_count = held.attempt
    WHERE t.status IN ('running', 'cancelling')
    FOR UPDATE OF t
)
UPDATE popagent_agent_tasks t SET
    approval_wait_id = NULL,
    approval_wait_tool = NULL,
    approval_wait_since = NULL,
    status = decided.next_status,
    uncounted_attempts = t.uncounted_attempts + CASE WHEN $3::boolean OR decided.next_status <> 'queued' THEN 0 ELSE 1 END,
    next_attempt_at = CASE WHEN decided.next_status = 'queued'
        THEN clock_timestamp() + make_interval(secs => $6::double precision) ELSE t.next_attempt_at END,
    dead_lettered_at = CASE WHEN decided.next_status = 'dead-letter' THEN clock_timestamp() END,
    last_error_class = CASE WHEN decided.next_status = 'cancelled' THEN t.last_error_class ELSE $4 END,
    last_error = CASE WHEN decided.next_status = 'cancelled' THEN t.last_error ELSE $5 END,
    finished_at = clock_timestamp(),
    updated_at = clock_timestamp()
FROM decided
WHERE t.id = decided.id
RETURNING t.id, t.kind, t.status, t.source, t.workspace_id, t.prompt, t.model, t.session_id, t.schedule_id,
    t.tick, t.parent_task_id, t.attempt_count, t.max_attempts, t.next_attempt_at, t.claimed_by,
    t.turn_id, t.trace_id, t.started_at, t.heartbeat_at, t.finished_at, t.last_error_class,
    t.last_error, t.dead_lettered_at, t.outcome, t.resolution, t.resolved_at, t.cancel_requested_at,
    t.created_at, t.updated_at, t.approval_wait_id, t.approval_wait_tool, t.approval_wait_since

-- name: recover_orphans
-- Recovery by heartbeat staleness ($1 s), never by a wall-clock guess. Attempts held by
-- the calling worker ($3) are never touched: an executor that ignored its abort still
-- occupies its slot, and recovering it would overlap a retry with it. Work orphaned
-- longer than $2 s is stale and fails instead of replaying.
WITH orphan AS (
    SELECT id, CASE
        WHEN status = 'cancelling' THEN 'cancelled'
        WHEN heartbeat_at < clock_timestamp() - make_interval(secs => $2::double precision) THEN 'failed'
        WHEN attempt_count - uncounted_attempts < max_attempts THEN 'queued'
        ELSE 'dead-letter'
    END AS next_status
    FROM popagent_agent_tasks
    WHERE status IN ('running', 'cancelling')
      AND heartbeat_at < clock_timestamp() - make_interval(secs => $1::double precision)
      AND NOT (id = ANY ($3::uuid[]))
    ORDER BY heartbeat_at
    LIMIT $4
    FOR UPDATE SKIP LOCKED
)
UPDATE popagent_agent_tasks t SET
    approval_wait_id = NULL,
    approval_wait_tool = NULL,
    approval_wait_since = NULL,
    status = orphan.next_status,
    next_attempt_at = CASE WHEN orphan.next_status = 'queued' THEN clock_timestamp() ELSE t.next_attempt_at END,
    dead_lettered_at = CASE WHEN orphan.next_status = 'dead-letter' THEN clock_timestamp() END,
    last_error_class = CASE orphan.next_status
        WHEN 'cancelled' THEN t.last_error_class WHEN 'failed' THEN 'stale' ELSE 'worker_lost' END,
    last_error = CASE orphan.next_status
        WHEN 'cancelled' THEN t.last_error
        WHEN 'failed' THEN 'the worker stopped heartbeating long ago; not replayed'
        ELSE 'the worker stopped heartbeating' END,
    finished_at = clock_timestamp(),
    updated_at = clock_timestamp()
FROM orphan
WHERE t.id = orphan.id
RETURNING t.id, t.kind, t.status, t.source, t.workspace_id, t.prompt, t.model, t.session_id, t.schedule_id,
    t.tick, t.parent_task_id, t.attempt_count, t.max_attempts, t.next_attempt_at, t.claimed_by,
    t.turn_id, t.trace_id, t.started_at, t.heartbeat_at, t.finished_at, t.last_error_class,
    t.last_error, t.dead_lettered_at, t.outcome, t.resolution, t.resolved_at, t.cancel_requested_at,
    t.created_at, t.updated_at, t.approval_wait_id, t.approval_wait_tool, t.approval_wait_since

-- name: insert_remediation
-- One remediation per terminally failed task (the partial unique index), in its
-- workspace, with durable lineage; remediation never begets remediation.
INSERT INTO popagent_agent_tasks
    (kind, status, source, workspace_id, prompt, model, session_id, max_attempts, parent_task_id)
SELECT 'remediation', 'queued', t.source, t.workspace_id, $2, t.model, '', t.max_attempts, t.id
FROM popagent_agent_tasks t
WHERE t.id = $1 AND t.kind = 'task' AND t.status IN ('failed', 'dead-letter')
ON CONFLICT (parent_task_id) WHERE kind = 'remediation' DO NOTHING
RETURNING id

-- name: insert_schedule
INSERT INTO popagent_agent_schedules
    (source, workspace_id, name, prompt, model, session_id, cron, timezone, next_run_at, enabled, max_attempts)
VALUES ('user', $1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
RETURNING id, source, workspace_id, name, prompt, model, session_id, cron, timezone, next_run_at, enabled,
    max_attempts, last_tick, created_at, updated_at

-- name: list_schedules
SELECT id, source, workspace_id, name, prompt, model, session_id, cron, timezone, next_run_at, enabled,
    max_attempts, last_tick, created_at, updated_at
FROM popagent_agent_schedules
WHERE ($1::text = '' OR workspace_id = $1)
ORDER BY created_at, id

-- name: lock_user_schedule
SELECT id, source, workspace_id, name, prompt, model, session_id, cron, timezone, next_run_at, enabled,
    max_attempts, last_tick, created_at, updated_at
FROM popagent_agent_schedules WHERE id = $1 AND source = 'user' FOR UPDATE

-- name: update_schedule
UPDATE popagent_agent_schedules SET
    name = $2, prompt = $3, model = $4, session_id = $5, cron = $6, timezone = $7,
    next_run_at = $8, enabled = $9, max_attempts = $10, updated_at = clock_timestamp()
WHERE id = $1 AND source = 'user'
RETURNING id, source, workspace_id, name, prompt, model, session_id, cron, timezone, next_run_at, enabled,
    max_attempts, last_tick, created_at, updated_at

-- name: delete_schedule
DELETE FROM popagent_agent_schedules WHERE id = $1 AND source = 'user' RETURNING id

-- name: lock_due_schedules
SELECT id, source, workspace_id, name, prompt, model, session_id, cron, timezone, next_run_at, enabled,
    max_attempts, last_tick, created_at, updated_at
FROM popagent_agent_schedules
WHERE enabled AND next_run_at <= clock_timestamp()
ORDER BY next_run_at, id
LIMIT $1
FOR UPDATE SKIP LOCKED

-- name: materialize_ticks
-- Copies provenance and maxAttempts from the row the caller holds locked. A tick some
-- other replica already materialized is silently skipped.
INSERT INTO popagent_agent_tasks
    (kind, status, source, workspace_id, prompt, model, session_id, max_attempts, schedule_id, tick, next_attempt_at)
SELECT 'task', 'queued', s.source, s.workspace_id, s.prompt, s.model, s.session_id, s.max_attempts, s.id, tick,
       clock_timestamp()
FROM popagent_agent_schedules s, unnest($2::timestamptz[]) AS tick
WHERE s.id = $1
ON CONFLICT ON CONSTRAINT popagent_agent_tasks_schedule_tick DO NOTHING
RETURNING id

-- name: advance_schedule
UPDATE popagent_agent_schedules SET next_run_at = $2, last_tick = $3, updated_at = clock_timestamp()
WHERE id = $1

-- name: next_schedule_due
SELECT min(next_run_at) FROM popagent_agent_schedules WHERE enabled

-- name: lock_backfill
SELECT pg_advisory_xact_lock(hashtext('popagent.tasks'), hashtext('schedule-backfill'))

-- name: backfill_marker
SELECT 1 FROM popagent_data_migrations WHERE scope = $1 AND name = $2

-- name: record_backfill_marker
INSERT INTO popagent_data_migrations (scope, name, checksum) VALUES ($1, $2, $3)

-- name: schedules_to_backfill
SELECT id, cron FROM popagent_agent_schedules WHERE timezone IS NULL OR next_run_at IS NULL FOR UPDATE

-- name: backfill_schedule
UPDATE popagent_agent_schedules SET
    timezone = COALESCE(timezone, $2), next_run_at = COALESCE(next_run_at, $3), enabled = enabled AND $4,
    updated_at = clock_timestamp()
WHERE id = $1

-- name: schedule_source
-- Which owner a schedule id belongs to (NULL: none); tells a system row's refusal from a missing row.
SELECT source FROM popagent_agent_schedules WHERE id = $1

-- name: lock_self_update_reconcile
-- Reconcilers run one at a time across every replica; the partial unique index still owns the slot.
SELECT pg_advisory_xact_lock(hashtext('popagent.tasks'), hashtext('self-update-reconcile'))

-- name: list_self_update_schedules
SELECT id, source, workspace_id, name, prompt, model, session_id, cron, timezone, next_run_at, enabled,
    max_attempts, last_tick, created_at, updated_at
FROM popagent_agent_schedules WHERE source = 'self-update'
ORDER BY workspace_id
FOR UPDATE

-- name: upsert_self_update_schedule
-- $1 workspace, $2 name, $3 prompt, $4 cron, $5 timezone, $6 next run, $7 max attempts. The slot is the
-- partial unique index: a second writer lands on the same row. The next run is kept unless the cron changed.
INSERT INTO popagent_agent_schedules
    (source, workspace_id, name, prompt, model, session_id, cron, timezone, next_run_at, enabled, max_attempts)
VALUES ('self-update', $1, $2, $3, '', '', $4, $5, $6, true, $7)
ON CONFLICT (workspace_id) WHERE source = 'self-update' DO UPDATE SET
    name = EXCLUDED.name,
    prompt = EXCLUDED.prompt,
    cron = EXCLUDED.cron,
    timezone = CASE WHEN popagent_agent_schedules.cron = EXCLUDED.cron AND popagent_agent_schedules.enabled
        THEN popagent_agent_schedules.timezone ELSE EXCLUDED.timezone END,
    next_run_at = CASE WHEN popagent_agent_schedules.cron = EXCLUDED.cron AND popagent_agent_schedules.enabled
        THEN popagent_agent_schedules.next_run_at ELSE EXCLUDED.next_run_at END,
    enabled = true,
    max_attempts = EXCLUDED.max_attempts,
    updated_at = clock_timestamp()
RETURNING id, source, workspace_id, name, prompt, model, session_id, cron, timezone, next_run_at, enabled,
    max_attempts, last_tick, created_at, updated_at

-- name: delete_self_update_schedule
DELETE FROM popagent_agent_schedules WHERE id = $1 AND source = 'self-update' RETURNING id

-- name: insert_task_channel
INSERT INTO popagent_task_channels (task_id, connection_id, conversation, thread) VALUES ($1, $2, $3, $4)

-- name: task_channel
SELECT connection_id, conversation, thread FROM popagent_task_channels WHERE task_id = $1

-- name: set_schedule_channel
INSERT INTO popagent_schedule_channels (schedule_id, connection_id, conversation, thread) VALUES ($1, $2, $3, $4)
ON CONFLICT (schedule_id) DO UPDATE
SET connection_id = EXCLUDED.connection_id, conversation = EXCLUDED.conversation, thread = EXCLUDED.thread

-- name: remove_schedule_channel
DELETE FROM popagent_schedule_channels WHERE schedule_id = $1

-- name: schedule_channels
SELECT schedule_id::text AS schedule_id, connection_id, conversation, thread
FROM popagent_schedule_channels WHERE schedule_id = ANY($1::uuid[])

-- name: inherit_schedule_channel
-- The tasks a schedule's ticks just created post where the schedule says.
INSERT INTO popagent_task_channels (task_id, connection_id, conversation, thread)
SELECT task_id, c.connection_id, c.conversation, c.thread
FROM popagent_schedule_channels c, unnest($2::uuid[]) AS task_id
WHERE c.schedule_id = $1
