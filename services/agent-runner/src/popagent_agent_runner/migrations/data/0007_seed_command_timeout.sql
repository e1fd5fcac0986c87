-- The workspace shell's default command timeout, seeded once: 120 s (at most 600 s).
UPDATE popagent_agent_runtime_settings SET command_timeout_ms = 120000 WHERE id = 1 AND command_timeout_ms IS NULL;
