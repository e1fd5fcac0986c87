-- Chat turns run on when their client goes away, seeded once.
UPDATE popagent_agent_runtime_settings SET continue_on_disconnect = true WHERE id = 1 AND continue_on_disconnect IS NULL;
