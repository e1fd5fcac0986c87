INSERT INTO popagent_browser_settings (id, enabled, updated_at) VALUES (1, false, now())
ON CONFLICT (id) DO NOTHING;
