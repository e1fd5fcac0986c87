-- Tool approvals and session grants (popagent_approvals, popagent_approval_grants; docs/approvals.md).

-- name: ask
-- One approval per tool call: a call asked again (a turn taken over) finds the one it asked first.
INSERT INTO popagent_approvals
    (id, session_id, turn_id, tool_call_id, agent_id, tool_name, arguments, reason, asked_by, expires_at)
VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8, $9, now() + make_interval(secs => $10))
ON CONFLICT (turn_id, tool_call_id) DO NOTHING

-- name: for_call
SELECT id, session_id, turn_id, tool_call_id, agent_id, tool_name, arguments::text, reason, asked_by, state, scope,
       answered_by, answer_reason, created_at, answered_at, expires_at, execution, outcome::text
FROM popagent_approvals WHERE turn_id = $1 AND tool_call_id = $2

-- name: get
SELECT id, session_id, turn_id, tool_call_id, agent_id, tool_name, arguments::text, reason, asked_by, state, scope,
       answered_by, answer_reason, created_at, answered_at, expires_at, execution, outcome::text
FROM popagent_approvals WHERE id = $1

-- name: expire
-- A pending approval past its time counts as denied.
UPDATE popagent_approvals
SET state = 'expired', answered_at = now(), answered_by = 'expiry',
    answer_reason = 'Nobody answered before the approval expired.'
WHERE id = $1 AND state = 'pending' AND expires_at <= now()
RETURNING id, session_id, turn_id, tool_call_id, agent_id, tool_name, arguments::text, reason, asked_by, state, scope,
       answered_by, answer_reason, created_at, answered_at, expires_at, execution, outcome::text

-- name: answer
-- Only a pending approval that has not expired takes an answer.
UPDATE popagent_approvals
SET state = $2, scope = $3, answered_by = $4, answer_reason = $5, answered_at = now()
WHERE id = $1 AND state = 'pending' AND expires_at > now()
RETURNING id, session_id, turn_id, tool_call_id, agent_id, tool_name, arguments::text, reason, asked_by, state, scope,
       answered_by, answer_reason, created_at, answered_at, expires_at, execution, outcome::text

-- name: grant
INSERT INTO popagent_approval_grants (session_id, tool_name, granted_by, approval_id)
VALUES ($1, $2, $3, $4)
ON CONFLICT (session_id, tool_name) DO NOTHING

-- name: granted
SELECT EXISTS (SELECT 1 FROM popagent_approval_grants WHERE session_id = $1 AND tool_name = $2)

-- name: grants
SELECT session_id, tool_name, granted_by, approval_id, created_at
FROM popagent_approval_grants WHERE session_id = $1 ORDER BY created_at, tool_name

-- name: revoke
DELETE FROM popagent_approval_grants WHERE session_id = $1 AND tool_name = $2 RETURNING tool_name

-- name: list
-- Newest first; a pending approval only while its turn still runs (a turn that ended asks nobody).
SELECT a.id, a.session_id, a.turn_id, a.tool_call_id, a.agent_id, a.tool_name, a.arguments::text, a.reason,
       a.asked_by, a.state, a.scope, a.answered_by, a.answer_reason, a.created_at, a.answered_at, a.expires_at,
       a.execution, a.outcome::text
FROM popagent_approvals a
WHERE ($1 = '' OR a.state = $1) AND ($2 = '' OR a.session_id = $2)
  AND (a.state <> 'pending'
       OR EXISTS (SELECT 1 FROM popagent_turns t WHERE t.id = a.turn_id AND t.status = 'running'))
ORDER BY a.created_at DESC, a.id
LIMIT 200

-- name: claim
-- An approved call is run by the one runner whose claim succeeds, and never again.
UPDATE popagent_approvals SET execution = 'started'
WHERE id = $1 AND state = 'approved' AND execution = 'not_started'
RETURNING id

-- name: finished
UPDATE popagent_approvals SET execution = 'finished', outcome = $2::jsonb WHERE id = $1

-- name: wait
UPDATE popagent_turns SET waiting_since = CASE WHEN $2 THEN coalesce(waiting_since, now()) END
WHERE id = $1 AND status = 'running'
