INSERT INTO popagent_autonomy_settings
    (id, evolution_enabled, skill_creation_enabled, self_update_enabled, self_update_cron, updated_at)
VALUES (1, false, false, false, '0 3 * * *', now())
ON CONFLICT (id) DO NOTHING;
