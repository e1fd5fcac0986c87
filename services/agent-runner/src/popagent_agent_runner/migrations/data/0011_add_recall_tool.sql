-- `recall` is registered now (issue 19): the supervisor searches the original messages of its
-- conversations. Appended after whatever its membership holds; an agent that lists it keeps its order.
UPDATE popagent_agents
SET tools = array_append(tools, 'recall'),
    updated_at = now()
WHERE id = 'popagent'
  AND NOT ('recall' = ANY (tools));
