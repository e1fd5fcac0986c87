"""agent-runner's persisted state: sessions, agents, workspaces, settings and the agents' skills
(served by `servicers/state.py` and `servicers/skills.py`).

| module | does |
|---|---|
| `sessions.py` | sessions, their deletion, and which sessions this process has seen start |
| `agents.py` | agent profiles and their editable fields |
| `workspaces.py` | workspaces and their folders |
| `settings_store.py` | the singleton settings rows (agent runtime, memory) |
| `settings_rules.py` | the bounds every settings field is checked against |
| `profiles.py` | the agent profiles and runtime settings as one turn reads them |
| `skills.py` | the agents' user-managed Agent Skills and their SKILL.md form |
| `orphans.py` | rows a crash or a defect left without their session, found and removed (`orphans.sql`) |
| `self_update.py` | the record of each contained self-update attempt (`self_update.sql`) |
| `named_secrets.py` | values kept in the secrets service by name: MCP servers' tokens, channels' credentials |
| `queries.sql` | the named queries of all of the above but `orphans.py` and `self_update.py` |
"""
