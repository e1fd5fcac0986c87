"""The skill catalog an agent's instructions carry: name and description of each enabled skill.

Progressive disclosure, as the Agent Skills specification has it: the catalog costs a line per
skill; the instructions come only when the agent loads a skill, a reference only when read.
Sorted by name so the prompt (and a provider's prompt cache) does not change between runs.
"""

from __future__ import annotations

from html import escape

from popagent_agent_runner.state.profiles import RunSkill

PREAMBLE = (
    "## Skills\n"
    "Skills are instructions for particular kinds of work, kept for you. They are not tools: when a request "
    "matches a skill's description, call the `skill` tool with its name and follow what it returns, without "
    "asking permission. Read a file the skill lists with `skill_read`, and search every skill's text with "
    "`skill_search`."
)


def skill_catalog(skills: tuple[RunSkill, ...]) -> str:
    """The catalog section of the instructions; empty when the agent has no enabled skill."""
    if not skills:
        return ""
    entries = "\n".join(
        f"<skill><name>{escape(skill.name)}</name><description>{escape(skill.description)}</description></skill>"
        for skill in sorted(skills, key=lambda s: s.name)
    )
    return f"{PREAMBLE}\n\n<available_skills>\n{entries}\n</available_skills>"
