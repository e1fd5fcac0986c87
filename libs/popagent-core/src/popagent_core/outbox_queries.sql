-- The transactional outbox (table `popagent_outbox`, a kernel migration in every service schema),
-- run on a connection whose search_path is the service's schema.

-- name: enqueue
-- One round trip: the row and the wake-up of this schema's relay (delivered at commit, like NOTIFY).
-- $4 is the channel prefix, so the channel is `popagent_outbox_<schema>`.
WITH event AS (INSERT INTO popagent_outbox (id, subject, payload, trace_context)
               VALUES ($1, $2, $3, $5::jsonb) RETURNING id)
SELECT pg_notify($4 || current_schema(), '') FROM event

-- name: lock_relay
-- One relay of a schema at a time, until the transaction ends.
SELECT pg_advisory_xact_lock(hashtextextended('popagent_outbox.' || current_schema(), 0))

-- name: pending
SELECT id, subject, payload, trace_context FROM popagent_outbox WHERE published_at IS NULL
ORDER BY seq LIMIT $1 FOR UPDATE SKIP LOCKED

-- name: count_attempt
UPDATE popagent_outbox SET attempts = attempts + 1 WHERE id = $1

-- name: mark_published
UPDATE popagent_outbox SET published_at = now() WHERE id = ANY($1)

-- name: purge_published
DELETE FROM popagent_outbox WHERE published_at < now() - make_interval(secs => $1)

-- name: current_schema
-- The schema whose relay this is, for its wake-up channel.
SELECT current_schema()
