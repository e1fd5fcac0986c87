-- The supervisor asks before it runs a shell command or fills a browser secret (docs/approvals.md,
-- Defaults); every other tool, reads included, runs unasked. Seeded once, and only over the empty
-- policy, so rules a user set are kept. The specialists start with no rules.
UPDATE popagent_agents
SET tool_approval = '[
    {"tool": "mastra_workspace_execute_command", "decision": "ask"},
    {"tool": "useBrowserSecret", "decision": "ask"}
]'::jsonb
WHERE id = 'popagent' AND tool_approval = '[]'::jsonb;
