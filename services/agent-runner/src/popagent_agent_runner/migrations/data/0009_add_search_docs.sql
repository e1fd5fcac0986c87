-- searchDocs is registered now (issue 16): every role searches its workspace's documentation.
-- Appended after whatever each membership holds; an agent that already lists it keeps its order.
UPDATE popagent_agents
SET tools = array_append(tools, 'searchDocs'),
    updated_at = now()
WHERE NOT ('searchDocs' = ANY (tools));
