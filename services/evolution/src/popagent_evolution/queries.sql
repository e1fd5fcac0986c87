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
