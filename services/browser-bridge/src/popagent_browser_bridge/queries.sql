-- name: get_browser_settings
SELECT enabled, allow_code_execution, updated_at FROM popagent_browser_settings WHERE id = 1

-- name: update_browser_settings
UPDATE popagent_browser_settings
SET enabled = coalesce($1, enabled), allow_code_execution = coalesce($2, allow_code_execution), updated_at = now()
WHERE id = 1
RETURNING enabled, allow_code_execution, updated_at
