-- name: get_autonomy_settings
SELECT evolution_enabled, skill_creation_enabled, self_update_enabled, self_update_cron, updated_at
FROM popagent_autonomy_settings WHERE id = 1

-- name: lock_autonomy_settings
SELECT evolution_enabled, skill_creation_enabled, self_update_enabled, self_update_cron, updated_at
FROM popagent_autonomy_settings WHERE id = 1 FOR UPDATE

-- name: update_autonomy_settings
UPDATE popagent_autonomy_settings
SET evolution_enabled = $1, skill_creation_enabled = $2, self_update_enabled = $3, self_update_cron = $4,
    updated_at = now()
WHERE id = 1
RETURNING evolution_enabled, skill_creation_enabled, self_update_enabled, self_update_cron, updated_at

-- Signals ----------------------------------------------------------------------------

-- name: insert_signals
-- A batch of signals in one statement ($1..$9 parallel arrays), each kept only when no
-- signal of its trace, agent and class exists (duplicates within the batch included).
INSERT INTO popagent_evolution_signals (
    id, event_id, trace_id, turn_id, session_id, agent_id, failure_class, goal, evidence,
    status, attempts, max_attempts, due_at, last_error
)
SELECT n.id, n.event_id, n.trace_id, n.turn_id, n.session_id, n.agent_id, n.failure_class, n.goal, n.evidence,
       'pending', 0, $10, now() + make_interval(secs => $11), ''
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[])
    AS n(id, event_id, trace_id, turn_id, session_id, agent_id, failure_class, goal, evidence)
ON CONFLICT (trace_id, agent_id, failure_class) DO NOTHING
RETURNING id

-- name: insert_outcomes
-- A batch of outcomes ($1..$3 parallel arrays), each event once however often it is delivered.
INSERT INTO popagent_evolution_outcomes (event_id, agent_id, succeeded)
SELECT n.event_id, n.agent_id, n.succeeded
FROM unnest($1::text[], $2::text[], $3::boolean[]) AS n(event_id, agent_id, succeeded)
ON CONFLICT (event_id) DO NOTHING

-- name: outcome_rate
SELECT count(*) FILTER (WHERE succeeded) AS succeeded, count(*) FILTER (WHERE NOT succeeded) AS failed
FROM popagent_evolution_outcomes
WHERE agent_id = $1 AND recorded_at > now() - make_interval(days => $2)

-- name: prune_outcomes
DELETE FROM popagent_evolution_outcomes WHERE recorded_at < now() - make_interval(days => $1)

-- name: recover_abandoned_claims
-- Claims older than the claim timeout belong to a worker that died or hung: their attempt
-- counts, and the signal is due again at once (or dead-lettered when attempts are spent).
UPDATE popagent_evolution_signals
SET status = CASE WHEN attempts >= max_attempts THEN 'dead_letter' ELSE 'pending' END,
    due_at = now(), claimed_at = NULL, claimed_by = NULL,
    last_error = 'claim abandoned by ' || coalesce(claimed_by, 'a worker'), updated_at = now()
WHERE status = 'claimed' AND claimed_at < now() - make_interval(secs => $1)
RETURNING id

-- name: claim_signals
-- Due signals, oldest first, claimed in one statement; `attempts` (the fencing token) is
-- incremented, so a stale worker's completion matches nothing.
WITH due AS (
    SELECT id FROM popagent_evolution_signals
    WHERE status = 'pending' AND due_at <= now()
    ORDER BY due_at, id
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
UPDATE popagent_evolution_signals s
SET status = 'claimed', attempts = s.attempts + 1, claimed_at = now(), claimed_by = $2, updated_at = now()
FROM due WHERE s.id = due.id
RETURNING s.id, s.event_id, s.trace_id, s.turn_id, s.session_id, s.agent_id, s.failure_class, s.goal,
          s.evidence, s.status, s.attempts, s.max_attempts, s.due_at, s.last_error, s.created_at, s.updated_at

-- name: lock_claimed_signals
-- The claimed signals ($1 ids, each with its fence in $2) still held by this attempt.
SELECT s.id, s.agent_id, s.trace_id, s.status
FROM popagent_evolution_signals s
JOIN unnest($1::uuid[], $2::int[]) AS c(id, attempts) ON c.id = s.id AND c.attempts = s.attempts
WHERE s.status = 'claimed'
FOR UPDATE OF s

-- name: settle_claimed_signals
-- Ends this attempt's claim on $1 (ids) with fences $2: applied, dismissed or ignored.
UPDATE popagent_evolution_signals s
SET status = $3, claimed_at = NULL, claimed_by = NULL, last_error = $4, updated_at = now()
FROM unnest($1::uuid[], $2::int[]) AS c(id, attempts)
WHERE s.id = c.id AND s.attempts = c.attempts AND s.status = 'claimed'
RETURNING s.id

-- name: fail_claimed_signals
-- A failed attempt: due again after capped exponential backoff ($3 base, $4 cap seconds),
-- or a terminal dead letter once its attempts are spent.
UPDATE popagent_evolution_signals s
SET status = CASE WHEN s.attempts >= s.max_attempts THEN 'dead_letter' ELSE 'pending' END,
    due_at = now() + make_interval(secs => least($4::float8, $3::float8 * power(2, s.attempts - 1))),
    claimed_at = NULL, claimed_by = NULL, last_error = left($5, 1000), updated_at = now()
FROM unnest($1::uuid[], $2::int[]) AS c(id, attempts)
WHERE s.id = c.id AND s.attempts = c.attempts AND s.status = 'claimed'
RETURNING s.id, s.status

-- name: list_signals
-- Bounded, newest first; $1 status and $2 agent filter when not NULL.
SELECT id, event_id, trace_id, turn_id, session_id, agent_id, failure_class, goal, evidence, status,
       attempts, max_attempts, due_at, last_error, created_at, updated_at
FROM popagent_evolution_signals
WHERE ($1::text IS NULL OR status = $1) AND ($2::text IS NULL OR agent_id = $2)
ORDER BY created_at DESC, id
LIMIT $3

-- name: ignore_signal
-- A user's ignore: pending or dead-letter signals only.
UPDATE popagent_evolution_signals
SET status = 'ignored', last_error = 'ignored by a user', updated_at = now()
WHERE id = $1 AND status IN ('pending', 'dead_letter')
RETURNING id, event_id, trace_id, turn_id, session_id, agent_id, failure_class, goal, evidence, status,
          attempts, max_attempts, due_at, last_error, created_at, updated_at

-- name: retry_signal
-- A dead letter back to pending, from attempt zero, due now.
UPDATE popagent_evolution_signals
SET status = 'pending', attempts = 0, due_at = now(), last_error = '', updated_at = now()
WHERE id = $1 AND status = 'dead_letter'
RETURNING id, event_id, trace_id, turn_id, session_id, agent_id, failure_class, goal, evidence, status,
          attempts, max_attempts, due_at, last_error, created_at, updated_at

-- name: signal_status
SELECT status FROM popagent_evolution_signals WHERE id = $1

-- Learned changes ----------------------------------------------------------------------

-- name: lock_overlay
SELECT agent_id, sections::text AS sections FROM popagent_learned_overlays WHERE agent_id = $1 FOR UPDATE

-- name: upsert_overlay
INSERT INTO popagent_learned_overlays (agent_id, sections, updated_at) VALUES ($1, $2::jsonb, now())
ON CONFLICT (agent_id) DO UPDATE SET sections = excluded.sections, updated_at = now()

-- name: lock_learned_skill
SELECT id, agent_id, name, description, instructions, evolution_managed, active
FROM popagent_learned_skills WHERE agent_id = $1 AND name = $2 FOR UPDATE

-- name: insert_learned_skill
INSERT INTO popagent_learned_skills (id, agent_id, name, description, instructions, evolution_managed, active)
VALUES ($1, $2, $3, $4, $5, true, true)

-- name: set_learned_skill
-- Only an evolution-managed skill is ever changed by learning.
UPDATE popagent_learned_skills
SET description = $3, instructions = $4, active = $5, updated_at = now()
WHERE agent_id = $1 AND name = $2 AND evolution_managed
RETURNING id

-- name: adopt_learned_skill
UPDATE popagent_learned_skills
SET evolution_managed = false, adopted_at = now(), updated_at = now()
WHERE agent_id = $1 AND id = $2
RETURNING id, agent_id, name, description, instructions, evolution_managed, active

-- name: get_learned_skill
SELECT id, agent_id, name, description, instructions, evolution_managed, active
FROM popagent_learned_skills WHERE agent_id = $1 AND id = $2

-- name: insert_revision
INSERT INTO popagent_evolution_revisions (
    id, target_kind, target_key, agent_id, before, after, strategy, signal_ids, trace_ids, reverts_revision_id
) VALUES ($1, $2, $3, $4, $5::jsonb, $6::jsonb, $7, $8::uuid[], $9::text[], $10)
RETURNING id, position, target_kind, target_key, agent_id, before::text AS before, after::text AS after, strategy,
          signal_ids, trace_ids, reverts_revision_id, created_at

-- name: get_revision
SELECT id, position, target_kind, target_key, agent_id, before::text AS before, after::text AS after, strategy,
       signal_ids, trace_ids, reverts_revision_id, created_at
FROM popagent_evolution_revisions WHERE id = $1

-- name: latest_revision_of
SELECT id FROM popagent_evolution_revisions WHERE target_key = $1 ORDER BY position DESC LIMIT 1

-- name: revert_of
SELECT id FROM popagent_evolution_revisions WHERE reverts_revision_id = $1

-- name: list_revisions
-- Newest first, bounded; $1 agent filter when not NULL.
SELECT id, position, target_kind, target_key, agent_id, before::text AS before, after::text AS after, strategy,
       signal_ids, trace_ids, reverts_revision_id, created_at
FROM popagent_evolution_revisions
WHERE ($1::text IS NULL OR agent_id = $1)
ORDER BY position DESC
LIMIT $2

-- name: learned_state
-- What agent runs compose: every overlay, and every active learned skill still evolution-managed.
SELECT 'overlay' AS kind, agent_id, '' AS id, '' AS name, '' AS description, sections::text AS body
FROM popagent_learned_overlays
UNION ALL
SELECT 'skill', agent_id, id::text, name, description, instructions
FROM popagent_learned_skills WHERE active AND evolution_managed
ORDER BY 2, 1, 4
