-- mastra_workspace_lsp_inspect is registered now (issue 16): every role gets it, as the spec's
-- AgentWorkspaceStore decision says. It is read-only and answers only an agent with workspace
-- access, so it joins the four seeded roles' memberships, appended after whatever they hold now;
-- an agent that already lists it keeps its order unchanged.
UPDATE popagent_agents
SET tools = array_append(tools, 'mastra_workspace_lsp_inspect'),
    updated_at = now()
WHERE id IN ('popagent', 'researcher', 'implementer', 'reviewer')
  AND NOT ('mastra_workspace_lsp_inspect' = ANY (tools));
