"""The tool registry: the tools the model sees, by the registry key hook matchers use.

Tools live in one folder per group (`time/`, `memory/`, and the workspace, browser, search, docs
and skill groups to come); adding a tool is one module with a `TOOL` in its group and one entry in
`TOOLS`. `TOOLS` is the one list of what exists: the agents' `knownTools` is derived from it, and
a membership naming anything else is refused (`PATCH /api/agents/:id` answers 422). An agent gets
the registered tools named in its persisted membership.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pydantic_ai import Tool

from popagent_agent_runner.turn.deps import TurnDeps
from popagent_agent_runner.turn.tools.memory import remember
from popagent_agent_runner.turn.tools.time import get_time

TOOLS: tuple[Tool[TurnDeps], ...] = (get_time.TOOL, remember.TOOL)


class ToolRegistry:
    def __init__(self, tools: Sequence[Tool[TurnDeps]] = TOOLS) -> None:
        self._tools: dict[str, Tool[TurnDeps]] = {}
        for tool in tools:
            if tool.name in self._tools:
                raise ValueError(f"tool {tool.name!r} is registered twice")
            self._tools[tool.name] = tool

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._tools)

    def tools_for(self, names: Iterable[str]) -> list[Tool[TurnDeps]]:
        """The registered tools among `names`, in that order."""
        return [self._tools[name] for name in names if name in self._tools]
