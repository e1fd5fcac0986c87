-- Contained self-update attempts (state/self_update.py). A statement that hands out attempts names
-- the columns of `SelfUpdateAttempt`, in this order.

-- name: start_attempt
-- A retry of the same attempt number (agent-runner restarted mid-attempt) starts the row afresh.
INSERT INTO popagent_self_update_attempts (id, task_id, attempt, workspace_id, status)
VALUES ($1, $2, $3, $4, 'running')
ON CONFLICT (id) DO UPDATE SET
    status = 'running', base_commit = '', base_branch = '', branch = '', delegations = '[]',
    changed_paths = '{}', diff_stat = '', verification = '', commit = NULL, ref = NULL, stages = '[]',
    created_at = now(), finished_at = NULL

-- name: prepared_attempt
UPDATE popagent_self_update_attempts SET base_commit = $2, base_branch = $3, branch = $4 WHERE id = $1

-- name: finish_attempt
UPDATE popagent_self_update_attempts SET
    status = $2, delegations = $3::jsonb, changed_paths = $4, diff_stat = $5, verification = $6, commit = $7,
    ref = $8, stages = $9::jsonb, finished_at = now()
WHERE id = $1

-- name: list_attempts
SELECT id, task_id, attempt, workspace_id, status, base_commit, base_branch, branch, delegations::text AS delegations,
    changed_paths, diff_stat, verification, commit, ref, stages::text AS stages, created_at, finished_at
FROM popagent_self_update_attempts
WHERE ($1::text = '' OR workspace_id = $1)
ORDER BY created_at DESC, id
LIMIT $2

-- name: get_attempt
SELECT id, task_id, attempt, workspace_id, status, base_commit, base_branch, branch, delegations::text AS delegations,
    changed_paths, diff_stat, verification, commit, ref, stages::text AS stages, created_at, finished_at
FROM popagent_self_update_attempts WHERE id = $1

-- name: clear_ref
UPDATE popagent_self_update_attempts SET ref = NULL WHERE id = $1 AND ref IS NOT NULL RETURNING id
