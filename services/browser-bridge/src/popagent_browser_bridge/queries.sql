-- name: get_browser_settings
SELECT enabled, allow_code_execution, updated_at FROM popagent_browser_settings WHERE id = 1

-- name: update_browser_settings
UPDATE popagent_browser_settings
SET enabled = coalesce($1, enabled), allow_code_execution = coalesce($2, allow_code_execution), updated_at = now()
WHERE id = 1
RETURNING enabled, allow_code_execution, updated_at

-- name: list_takeovers
SELECT session_id FROM popagent_browser_takeovers ORDER BY taken_at

-- name: hold_takeover
INSERT INTO popagent_browser_takeovers (session_id, taken_at) VALUES ($1, now()) ON CONFLICT (session_id) DO NOTHING

-- name: release_takeover
DELETE FROM popagent_browser_takeovers WHERE session_id = $1

-- name: list_tab_owners
SELECT target_id, session_id FROM popagent_browser_tab_owners

-- name: save_tab_owner
INSERT INTO popagent_browser_tab_owners (target_id, session_id, updated_at) VALUES ($1, $2, now())
ON CONFLICT (target_id) DO UPDATE SET session_id = EXCLUDED.session_id, updated_at = now()

-- name: forget_tab_owners
DELETE FROM popagent_browser_tab_owners WHERE target_id = ANY($1::text[])
