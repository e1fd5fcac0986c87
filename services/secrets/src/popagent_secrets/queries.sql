-- name: count_encryption
-- One more encryption under key $1; returns the total including this one.
INSERT INTO popagent_secret_key_usage (key_id, encryptions) VALUES ($1, 1)
ON CONFLICT (key_id) DO UPDATE
SET encryptions = popagent_secret_key_usage.encryptions + 1, updated_at = now()
RETURNING encryptions

-- name: upsert_secret
INSERT INTO popagent_secrets (resource_id, name, key_id, nonce, ciphertext)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (resource_id, name) DO UPDATE
SET key_id = EXCLUDED.key_id, nonce = EXCLUDED.nonce, ciphertext = EXCLUDED.ciphertext, updated_at = now()
RETURNING id, created_at, updated_at, (xmax = 0) AS inserted

-- name: count_secrets_of_resource
SELECT count(*) FROM popagent_secrets WHERE resource_id = $1

-- name: lock_secret
SELECT id, created_at, updated_at FROM popagent_secrets WHERE resource_id = $1 AND name = $2 FOR UPDATE

-- name: get_secret
SELECT id, created_at, updated_at FROM popagent_secrets WHERE resource_id = $1 AND name = $2

-- name: list_origins
SELECT origin FROM popagent_secret_bindings WHERE resource_id = $1 AND name = $2 ORDER BY origin

-- name: list_secrets
-- Metadata only: this query never selects nonce or ciphertext.
SELECT s.id, s.resource_id, s.name, s.created_at, s.updated_at,
       coalesce(array_agg(b.origin ORDER BY b.origin) FILTER (WHERE b.origin IS NOT NULL), '{}') AS origins
FROM popagent_secrets s
LEFT JOIN popagent_secret_bindings b ON b.resource_id = s.resource_id AND b.name = s.name
WHERE $1 = '' OR s.resource_id = $1
GROUP BY s.id, s.resource_id, s.name, s.created_at, s.updated_at
ORDER BY s.resource_id, s.name
LIMIT $2

-- name: delete_secret
-- Its origin bindings go with it (ON DELETE CASCADE). $2: only a secret of one of these resources (NULL: any).
DELETE FROM popagent_secrets WHERE id = $1 AND ($2::text[] IS NULL OR resource_id = ANY ($2)) RETURNING resource_id, name

-- name: insert_binding
INSERT INTO popagent_secret_bindings (resource_id, name, origin) VALUES ($1, $2, $3)
ON CONFLICT DO NOTHING
RETURNING origin

-- name: count_bindings
SELECT count(*) FROM popagent_secret_bindings WHERE resource_id = $1 AND name = $2

-- name: delete_binding
DELETE FROM popagent_secret_bindings WHERE resource_id = $1 AND name = $2 AND origin = $3 RETURNING origin

-- name: resolve_secret
-- The sealed value, and whether origin $3 is bound to it (exact match on the canonical form).
SELECT s.key_id, s.nonce, s.ciphertext,
       EXISTS (
           SELECT 1 FROM popagent_secret_bindings b
           WHERE b.resource_id = s.resource_id AND b.name = s.name AND b.origin = $3
       ) AS bound
FROM popagent_secrets s
WHERE s.resource_id = $1 AND s.name = $2

-- name: next_stale_secret
-- Re-encryption walks rows not on the current key in primary-key order, one locked row
-- at a time; rows a concurrent write holds are skipped and picked up by a later pass.
SELECT resource_id, name, key_id, nonce, ciphertext
FROM popagent_secrets
WHERE key_id <> $1 AND (resource_id, name) > ($2, $3)
ORDER BY resource_id, name
LIMIT 1
FOR UPDATE SKIP LOCKED

-- name: rewrap_secret
-- Optimistic check on the old key id and nonce as well as the row lock: a value rotated
-- in between is never overwritten with the older value. updated_at is kept: the value
-- did not change.
UPDATE popagent_secrets SET key_id = $3, nonce = $4, ciphertext = $5
WHERE resource_id = $1 AND name = $2 AND key_id = $6 AND nonce = $7
RETURNING name

-- name: count_stale_secrets
SELECT count(*) FROM popagent_secrets WHERE key_id <> $1

-- name: secret_resource
SELECT resource_id FROM popagent_secrets WHERE id = $1
