-- Chat turns as records (popagent_turns; docs/turns.md).

-- name: expire_running
-- The session's running turn whose runner's lease passed ends as interrupted, so the next turn can start.
UPDATE popagent_turns SET status = 'interrupted', ended_at = now()
WHERE session_id = $1 AND status = 'running' AND lease_until < now()

-- name: start
-- Nothing when a turn already runs on the session (the partial unique index); the caller decides.
INSERT INTO popagent_turns (id, session_id, status, runner_id, lease_until)
VALUES ($1, $2, 'running', $3, now() + make_interval(secs => $4))
ON CONFLICT DO NOTHING
RETURNING id

-- name: running
-- The session (no row: no such session) and its running turn with its lease still valid (NULLs: none).
SELECT t.id, s.id AS session_id, t.status, t.runner_id, true AS leased
FROM popagent_sessions s
LEFT JOIN popagent_turns t ON t.session_id = s.id AND t.status = 'running' AND t.lease_until >= now()
WHERE s.id = $1

-- name: get
SELECT id, session_id, status, runner_id, lease_until >= now() AS leased
FROM popagent_turns WHERE id = $1 AND session_id = $2

-- name: renew
-- This runner's running turns keep their leases; the ids it still holds come back.
UPDATE popagent_turns SET lease_until = now() + make_interval(secs => $3)
WHERE id = ANY($1::text[]) AND runner_id = $2 AND status = 'running'
RETURNING id

-- name: finish
-- Fenced by the runner: a turn whose lease another process expired stays as it was left.
UPDATE popagent_turns SET status = $3, ended_at = now()
WHERE id = $1 AND runner_id = $2 AND status = 'running'

-- name: interrupt_runner
-- At start: what this runner (same name) was running when it stopped ends as interrupted.
UPDATE popagent_turns SET status = 'interrupted', ended_at = now()
WHERE runner_id = $1 AND status = 'running'
RETURNING id
