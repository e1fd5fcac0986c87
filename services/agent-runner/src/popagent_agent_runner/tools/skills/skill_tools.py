"""`skill`, `skill_read` and `skill_search`: load, read and search the agent's enabled skills."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field
from pydantic_ai import RunContext, Tool

from popagent_agent_runner.context.deps import TurnDeps
from popagent_agent_runner.state.profiles import RunSkill

MAX_READ_CHARS = 20_000
PREVIEW_CHARS = 200
MAX_TOP_K = 20


def _skills(ctx: RunContext[TurnDeps]) -> dict[str, RunSkill]:
    return {skill.name: skill for skill in ctx.deps.turn.profiles[ctx.deps.agent_id].skills}


def _available(skills: dict[str, RunSkill]) -> str:
    return ", ".join(sorted(skills)) or "none"


async def skill(
    ctx: RunContext[TurnDeps],
    name: Annotated[str, Field(min_length=1, max_length=64, description="the skill's name from the catalog")],
) -> str:
    """Load a skill's instructions into this run. Call it when a request matches a skill's description."""
    skills = _skills(ctx)
    found = skills.get(name)
    if found is None:
        return f'Skill "{name}" not found. Available skills: {_available(skills)}'
    listing = "\n".join(f"- {path}" for path, _ in found.references)
    resources = f"\n\n## References\n{listing}\n\nRead one with skill_read." if listing else ""
    return f'<skill_content name="{found.name}">\n{found.instructions}{resources}\n</skill_content>'


async def skill_read(
    ctx: RunContext[TurnDeps],
    skill_name: Annotated[str, Field(min_length=1, max_length=64, description="the skill the file belongs to")],
    path: Annotated[str, Field(min_length=1, max_length=200, description="the file's path, as the skill lists it")],
    start_line: Annotated[int | None, Field(ge=1, description="first line to read (1-based)")] = None,
    end_line: Annotated[int | None, Field(ge=1, description="last line to read (inclusive)")] = None,
) -> str:
    """Read one of a skill's reference files, whole or a range of its lines."""
    skills = _skills(ctx)
    found = skills.get(skill_name)
    if found is None:
        return f'Skill "{skill_name}" not found. Available skills: {_available(skills)}'
    files = dict(found.references)
    text = files.get(path)
    if text is None:
        listed = ", ".join(files) or "none"
        return f'"{path}" is not a file of skill "{skill_name}". Its files: {listed}'
    if start_line is None and end_line is None:
        return _bounded(text)
    lines = text.splitlines()
    first = start_line or 1
    last = min(end_line or len(lines), len(lines))
    if first > len(lines):
        return f"{path} has {len(lines)} lines; line {first} is past its end. Stop reading this file."
    return _bounded(f"{path} (lines {first}-{last} of {len(lines)})\n" + "\n".join(lines[first - 1 : last]))


def _bounded(text: str) -> str:
    if len(text) <= MAX_READ_CHARS:
        return text
    return text[:MAX_READ_CHARS] + "\n[truncated: read a line range for the rest]"


def _terms(query: str) -> list[str]:
    return [term for term in re.findall(r"\w+", query.lower()) if len(term) > 1]


async def skill_search(
    ctx: RunContext[TurnDeps],
    query: Annotated[str, Field(min_length=1, max_length=500, description="words to look for")],
    skill_names: Annotated[
        list[str] | None, Field(max_length=50, description="search only these skills (default: all)")
    ] = None,
    top_k: Annotated[int, Field(ge=1, le=MAX_TOP_K, description="how many matches to return")] = 5,
) -> str:
    """Search the text of the skills (instructions and reference files) for passages about something."""
    terms = _terms(query)
    if not terms:
        return "No results found."
    hits: list[tuple[float, str, str, int, str]] = []
    for found in _skills(ctx).values():
        if skill_names and found.name not in skill_names:
            continue
        for source, text in (("SKILL.md", found.instructions), *found.references):
            for number, line in enumerate(text.splitlines(), start=1):
                lowered = line.lower()
                matched = sum(1 for term in terms if term in lowered)
                if matched:
                    hits.append((matched / len(terms), found.name, source, number, line.strip()))
    if not hits:
        return "No results found."
    hits.sort(key=lambda hit: (-hit[0], hit[1], hit[2], hit[3]))
    return "\n\n".join(
        f"[{name}] {source} (line {number}) (score: {score:.2f})\n{line[:PREVIEW_CHARS]}"
        for score, name, source, number, line in hits[:top_k]
    )


SKILL_TOOLS: tuple[Tool[TurnDeps], ...] = (
    Tool(skill, name="skill"),
    Tool(skill_read, name="skill_read"),
    Tool(skill_search, name="skill_search"),
)
