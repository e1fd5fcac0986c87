-- name: get_autonomy_settings
SELECT evolution_enabled, skill_creation_enabled, self_update_enabled, self_update_cron, updated_at
FROM popagent_autonomy_settings WHERE id = 1
