-- The researcher and the reviewer inherit the default model, as the implementer does. 0004
-- seeded them a 9Router id (`cx/gpt-5.3-codex-spark`) that other model gateways do not list,
-- and an unlisted override refuses every chat the supervisor may delegate from. Only the
-- seeded value is cleared: an override a user chose is kept. The 9Router ids are a preset
-- now (docs/configuration.md, Model gateway presets), set by hand.
UPDATE popagent_agents
SET model = NULL
WHERE id IN ('researcher', 'reviewer') AND model = 'cx/gpt-5.3-codex-spark';
