"""The Agent Skills tools (`skill`, `skill_read`, `skill_search`) and the catalog in the instructions.

An agent gets them only when it has at least one enabled skill; they reach only that agent's
enabled skills, as this turn read them (`AgentProfile.skills`).
"""
