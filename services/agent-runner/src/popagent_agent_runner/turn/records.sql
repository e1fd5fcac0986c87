-- Chat turns as records (popagent_turns; docs/turns.md).

-- name: expire_running
-- The session's running turn whose runner's lease passed ends as interrupted, so the next turn can start.
UPDATE popagent_turns SET status = 'interrupted', ended_at = now()
WHERE session_id = $1 AND status = 'running' AND lease_until < now()

-- name: start
-- Nothing when a turn already runs on the session (the partial unique index) or waits on it (queued
-- turns go first); the caller decides. Its own transaction, committed without waiting for the WAL
-- flush as `_unflushed` does, in one round trip: the turn's first event waits for it.
INSERT INTO popagent_turns (id, session_id, status, runner_id, lease_until, task_id, request)
SELECT $1, $2, 'running', $3, now() + make_interval(secs => $4), $5, $6::jsonb
FROM (SELECT set_config('synchronous_commit', 'off', true)) AS unflushed
WHERE NOT EXISTS (SELECT 1 FROM popagent_turns WHERE session_id = $2 AND status = 'queued')
ON CONFLICT DO NOTHING
RETURNING id

-- name: start_task
-- `start` for a task attempt's turn. With $6, nothing either when an earlier attempt's turn of the
-- task completed with its answer (`completed_task`): this attempt takes that answer, nothing runs
-- twice. In the same statement, so a turn completing meanwhile is never missed.
INSERT INTO popagent_turns (id, session_id, status, runner_id, lease_until, task_id)
SELECT $1, $2, 'running', $3, now() + make_interval(secs => $4), $5
FROM (SELECT set_config('synchronous_commit', 'off', true)) AS unflushed
WHERE NOT EXISTS (SELECT 1 FROM popagent_turns WHERE session_id = $2 AND status = 'queued')
  AND NOT (CASE WHEN $6 THEN EXISTS (
      SELECT 1 FROM popagent_turns
      WHERE task_id = $5 AND status = 'completed' AND task_outcome IS NOT NULL
  ) ELSE false END)
ON CONFLICT DO NOTHING
RETURNING id

-- name: completed_task
SELECT id, task_outcome FROM popagent_turns
WHERE task_id = $1 AND status = 'completed' AND task_outcome IS NOT NULL
ORDER BY ended_at
LIMIT 1

-- name: running
-- The session (no row: no such session) and its running turn with its lease still valid (NULLs: none).
SELECT t.id, s.id AS session_id, t.status, t.runner_id, true AS leased, t.task_id
FROM popagent_sessions s
LEFT JOIN popagent_turns t ON t.session_id = s.id AND t.status = 'running' AND t.lease_until >= now()
WHERE s.id = $1

-- name: running_for_message
-- The session's running turn when its prompt is the message with this id (leased or not: a runner
-- lost before its first event still holds it until another takes it over or it ends).
SELECT id FROM popagent_turns
WHERE session_id = $1 AND status = 'running' AND request -> 'message' ->> 'id' = $2

-- name: get
SELECT id, session_id, status, runner_id, lease_until >= now() AS leased, task_id
FROM popagent_turns WHERE id = $1 AND session_id = $2

-- name: renew
-- This runner's running and queued turns keep their leases; the ids it still holds come back.
UPDATE popagent_turns SET lease_until = now() + make_interval(secs => $3)
WHERE id = ANY($1::text[]) AND runner_id = $2 AND status IN ('running', 'queued')
RETURNING id

-- name: finish
-- Fenced by the runner: a turn whose lease another process expired stays as it was left.
UPDATE popagent_turns SET status = $3, ended_at = now(), task_outcome = $4
WHERE id = $1 AND runner_id = $2 AND status = 'running'

-- name: release_runner
-- At start: what this runner (same name) was running when it stopped is lost now, so a runner
-- (this one, or another) takes it over at once instead of when its lease would have passed.
UPDATE popagent_turns SET lease_until = now() - interval '1 second'
WHERE runner_id = $1 AND status = 'running'
RETURNING id

-- Queued turns ('enqueue') -----------------------------------------------------------------

-- name: queue
-- The turn waits behind the session's running turn and older queued ones; how many turns are ahead.
WITH queued AS (
    INSERT INTO popagent_turns (id, session_id, status, runner_id, lease_until, queued_at, request)
    VALUES ($1, $2, 'queued', $3, now() + make_interval(secs => $4), clock_timestamp(), $5::jsonb)
    RETURNING queued_at
)
SELECT count(*)::int AS ahead FROM popagent_turns t, queued
WHERE t.session_id = $2 AND (t.status = 'running' OR (t.status = 'queued' AND t.queued_at < queued.queued_at))

-- name: start_queued
-- The queued turn runs when it is the session's oldest queued turn and none runs (the partial
-- unique index refuses a second running turn: the caller waits and asks again).
UPDATE popagent_turns t SET status = 'running', lease_until = now() + make_interval(secs => $3), started_at = now()
WHERE t.id = $1 AND t.runner_id = $2 AND t.status = 'queued'
  AND NOT EXISTS (
      SELECT 1 FROM popagent_turns o
      WHERE o.session_id = t.session_id AND o.status = 'queued' AND (o.queued_at, o.id) < (t.queued_at, t.id)
  )
RETURNING id

-- name: cancel_queued
UPDATE popagent_turns SET status = 'cancelled', ended_at = now()
WHERE id = $1 AND session_id = $2 AND status = 'queued'
RETURNING id

-- name: adopt_queued
-- Queued turns whose runner's lease passed (the runner died), or this runner's own from before a
-- restart, are this runner's now: what they run, oldest first.
WITH adopted AS (
    UPDATE popagent_turns SET runner_id = $1, lease_until = now() + make_interval(secs => $2)
    WHERE status = 'queued' AND (lease_until < now() OR runner_id = $1) AND NOT (id = ANY($3::text[]))
    RETURNING id, session_id, request::text AS request, queued_at
)
SELECT id, session_id, request, queued_at FROM adopted ORDER BY queued_at, id

-- name: queued_turns
SELECT id, session_id, request::text AS request, queued_at FROM popagent_turns
WHERE session_id = $1 AND status = 'queued' ORDER BY queued_at, id

-- name: release_queued
-- A runner that stops lets go of the queued turns it waited with: another runner adopts them now.
UPDATE popagent_turns SET lease_until = now() - interval '1 second'
WHERE runner_id = $1 AND status = 'queued' AND id = ANY($2::text[])

-- Takeover (a runner died mid-turn) -----------------------------------------------------------

-- name: progress
-- The turn's progress so far (its messages and UI message), fenced by its runner.
UPDATE popagent_turns SET progress = $3::jsonb WHERE id = $1 AND runner_id = $2 AND status = 'running'

-- name: take_over_lost
-- Chat turns whose runner's lease passed are this runner's now, to go on from their progress (or
-- their prompt), at most $3 attempts each: what they run and how far they got.
UPDATE popagent_turns SET runner_id = $1, lease_until = now() + make_interval(secs => $2), attempts = attempts + 1
WHERE status = 'running' AND lease_until < now() AND task_id IS NULL AND request IS NOT NULL AND attempts < $3
RETURNING id, session_id, request::text AS request, queued_at, progress::text AS progress

-- name: end_lost
-- Running turns whose runner's lease passed and that cannot be taken over end as interrupted.
UPDATE popagent_turns SET status = 'interrupted', ended_at = now()
WHERE status = 'running' AND lease_until < now() AND (task_id IS NOT NULL OR request IS NULL OR attempts >= $1)
RETURNING id

-- name: following
-- The session (no row: no such session) and its running turn, its lease valid or not (a turn whose
-- runner was lost is followed while another takes it over).
SELECT t.id, s.id AS session_id, t.status, t.runner_id, t.lease_until >= now() AS leased, t.task_id
FROM popagent_sessions s
LEFT JOIN popagent_turns t ON t.session_id = s.id AND t.status = 'running'
WHERE s.id = $1

-- name: release_running
-- A runner that stops hands its running turns over: their leases pass now, so another runner
-- takes them over at once.
UPDATE popagent_turns SET lease_until = now() - interval '1 second'
WHERE id = ANY($1::text[]) AND runner_id = $2 AND status = 'running'
