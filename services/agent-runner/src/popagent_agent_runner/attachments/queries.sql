-- name: insert_attachment
-- Refused (no row) when the session is unknown, being deleted, or already holds the most attachments.
INSERT INTO popagent_session_attachments (id, session_id, filename, media_type, size, content)
SELECT $1, s.id, $3, $4, $5, $6
FROM popagent_sessions s
WHERE s.id = $2 AND s.deleting_at IS NULL
  AND (SELECT count(*) FROM popagent_session_attachments a WHERE a.session_id = s.id) < $7
RETURNING id, session_id, filename, media_type, size, created_at

-- name: list_attachments
SELECT id, session_id, filename, media_type, size, created_at
FROM popagent_session_attachments
WHERE session_id = $1
ORDER BY created_at, id

-- name: get_attachment
SELECT id, session_id, filename, media_type, size, created_at, content
FROM popagent_session_attachments
WHERE session_id = $1 AND id = $2
