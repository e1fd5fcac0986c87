"""agent-runner's persisted state: sessions, agents, workspaces and settings behind `AgentRunnerStateService`,
the agents' skills behind `AgentRunnerSkillsService`.

| module | does |
|---|---|
| `sessions.py` | sessions, their deletion, and which sessions this process has seen start |
| `agents.py` | agent profiles and their editable fields |
| `workspaces.py` | workspaces and their folders |
| `settings_store.py` | the singleton settings rows (agent runtime, memory) |
| `settings_rules.py` | the bounds every settings field is checked against |
| `state_servicer.py` | `AgentRunnerStateService`, proto in and out only |
| `skills.py` | the agents' user-managed Agent Skills and their SKILL.md form |
| `skills_servicer.py` | `AgentRunnerSkillsService`: user skills beside evolution's learned ones, adopted on edit |
| `queries.sql` | the named queries of all of the above |
"""
