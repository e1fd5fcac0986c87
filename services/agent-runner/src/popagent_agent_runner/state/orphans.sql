-- What `python -m popagent_agent_runner repair` finds and reconciles (state/orphans.py). Every query
-- leaves alone rows younger than $2 seconds: a session, a thread or a turn being created right now.

-- name: orphan_threads
-- Chat threads (top level, the user's resource) whose session row is gone. A task's thread has a
-- session row of its own, so it is never one of these.
SELECT t.id FROM popagent_threads t
WHERE t.parent_id IS NULL AND t.resource_id = $1
  AND t.created_at < now() - make_interval(secs => $2)
  AND NOT EXISTS (SELECT 1 FROM popagent_sessions s WHERE s.id = t.id)
ORDER BY t.id
LIMIT 10000

-- name: delete_orphan_threads
-- Their messages, observational state and specialist threads cascade.
DELETE FROM popagent_threads t
WHERE t.id = ANY($1::text[]) AND t.parent_id IS NULL
  AND NOT EXISTS (SELECT 1 FROM popagent_sessions s WHERE s.id = t.id)

-- name: orphan_turns
-- Turn records (no foreign key: see their migration) of sessions that no longer exist.
SELECT t.id FROM popagent_turns t
WHERE coalesce(t.queued_at, t.started_at) < now() - make_interval(secs => $1)
  AND NOT EXISTS (SELECT 1 FROM popagent_sessions s WHERE s.id = t.session_id)
ORDER BY t.id
LIMIT 10000

-- name: delete_orphan_turns
DELETE FROM popagent_turns t
WHERE t.id = ANY($1::text[]) AND NOT EXISTS (SELECT 1 FROM popagent_sessions s WHERE s.id = t.session_id)

-- name: orphan_approvals
SELECT a.id FROM popagent_approvals a
WHERE a.created_at < now() - make_interval(secs => $1)
  AND NOT EXISTS (SELECT 1 FROM popagent_sessions s WHERE s.id = a.session_id)
ORDER BY a.id
LIMIT 10000

-- name: delete_orphan_approvals
DELETE FROM popagent_approvals a
WHERE a.id = ANY($1::text[]) AND NOT EXISTS (SELECT 1 FROM popagent_sessions s WHERE s.id = a.session_id)

-- name: orphan_grants
SELECT g.session_id, g.tool_name FROM popagent_approval_grants g
WHERE g.created_at < now() - make_interval(secs => $1)
  AND NOT EXISTS (SELECT 1 FROM popagent_sessions s WHERE s.id = g.session_id)
ORDER BY g.session_id, g.tool_name
LIMIT 10000

-- name: delete_orphan_grants
DELETE FROM popagent_approval_grants g
WHERE g.session_id = ANY($1::text[]) AND NOT EXISTS (SELECT 1 FROM popagent_sessions s WHERE s.id = g.session_id)
