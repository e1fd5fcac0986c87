"""agent-runner's persisted state behind `AgentRunnerStateService`: sessions, agents, workspaces, settings.

| module | does |
|---|---|
| `sessions.py` | sessions, their deletion, and which sessions this process has seen start |
| `agents.py` | agent profiles and their editable fields |
| `workspaces.py` | workspaces and their folders |
| `settings_store.py` | the singleton settings rows (agent runtime, memory) |
| `settings_rules.py` | the bounds every settings field is checked against |
| `state_servicer.py` | `AgentRunnerStateService`, proto in and out only |
| `queries.sql` | the named queries of all of the above |
"""
