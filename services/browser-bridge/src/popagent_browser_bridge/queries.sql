-- name: get_browser_settings
SELECT enabled, updated_at FROM popagent_browser_settings WHERE id = 1

-- name: update_browser_settings
UPDATE popagent_browser_settings SET enabled = $1, updated_at = now() WHERE id = 1
RETURNING enabled, updated_at
