-- bifrostNavigator and useBrowserSecret are registered now (the browser issue). The agents with
-- persisted browser access get them, appended after whatever their membership holds now:
-- bifrostNavigator for read-only and interactive access, useBrowserSecret for interactive only
-- (browser-bridge refuses it below interactive anyway). An agent that already lists one keeps its order.
UPDATE popagent_agents
SET tools = array_append(tools, 'bifrostNavigator'),
    updated_at = now()
WHERE browser_access IN ('read-only', 'interactive')
  AND NOT ('bifrostNavigator' = ANY (tools));

UPDATE popagent_agents
SET tools = array_append(tools, 'useBrowserSecret'),
    updated_at = now()
WHERE browser_access = 'interactive'
  AND NOT ('useBrowserSecret' = ANY (tools));
