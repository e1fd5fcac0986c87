-- webSearch and webFetch are registered now (issue 16). 0004 seeded webSearch for every
-- role and 0005 took it out while it was unregistered; it goes back to those four agents,
-- appended after whatever their membership holds now. webFetch is new: the researcher reads
-- the pages it finds. An agent that already lists a tool keeps its order unchanged.
UPDATE popagent_agents
SET tools = array_append(tools, 'webSearch'),
    updated_at = now()
WHERE id IN ('popagent', 'researcher', 'implementer', 'reviewer')
  AND NOT ('webSearch' = ANY (tools));

UPDATE popagent_agents
SET tools = array_append(tools, 'webFetch'),
    updated_at = now()
WHERE id = 'researcher'
  AND NOT ('webFetch' = ANY (tools));
