"""The tool registry: the tools the model sees, by the registry key hook matchers use.

Tools live in one folder per group (`time/`, `memory/`, `search/`, `fetch/`, `lsp/`, `browser/`, `docs/`,
`workspace/`, `skills/`); the clients they drive are the layers below (`web/`, `browser/`, `memory/`,
`docs/`, `workspace/`, `lsp/`). Adding a tool is one module with a `TOOL` in its group and one entry in
`TOOLS`. `TOOLS` is the one list of what exists: the agents' `knownTools` is derived from it, and
a membership naming anything else is refused (`PATCH /api/agents/:id` answers 422). An agent gets
the registered tools named in its persisted membership. The workspace tools (Mastra's registry
keys, `workspace/`) are registered here too but are no membership: an agent gets them by its
persisted workspace access. Likewise the skill tools (`skills/`): an agent gets them when it
has at least one enabled skill.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from pydantic_ai import Tool

from popagent_agent_runner.context.deps import TurnDeps
from popagent_agent_runner.tools.browser import bifrost_navigator, use_browser_secret
from popagent_agent_runner.tools.docs import search_docs
from popagent_agent_runner.tools.fetch import web_fetch
from popagent_agent_runner.tools.lsp import lsp_inspect
from popagent_agent_runner.tools.memory import recall, remember
from popagent_agent_runner.tools.search import web_search
from popagent_agent_runner.tools.skills.skill_tools import SKILL_TOOLS
from popagent_agent_runner.tools.time import get_time
from popagent_agent_runner.tools.workspace import BY_ACCESS, READ_WRITE_TOOLS

TOOLS: tuple[Tool[TurnDeps], ...] = (
    get_time.TOOL,
    remember.TOOL,
    web_search.TOOL,
    web_fetch.TOOL,
    lsp_inspect.TOOL,
    bifrost_navigator.TOOL,
    use_browser_secret.TOOL,
    search_docs.TOOL,
    recall.TOOL,
)
# Every tool registry key an agent's membership can name (the names the model sees and hook matchers use).
KNOWN_TOOLS: tuple[str, ...] = tuple(tool.name for tool in TOOLS)


class ToolRegistry:
    def __init__(
        self,
        tools: Sequence[Tool[TurnDeps]] = TOOLS,
        workspace_tools: Mapping[str, Sequence[Tool[TurnDeps]]] = BY_ACCESS,
    ) -> None:
        self._tools: dict[str, Tool[TurnDeps]] = {}
        for tool in (*tools, *READ_WRITE_TOOLS, *SKILL_TOOLS):
            if tool.name in self._tools:
                raise ValueError(f"tool {tool.name!r} is registered twice")
            self._tools[tool.name] = tool
        self._members = tuple(tool.name for tool in tools)
        self._workspace = {access: list(granted) for access, granted in workspace_tools.items()}

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    @property
    def names(self) -> tuple[str, ...]:
        """The tools a membership may name (workspace tools follow workspace access instead)."""
        return self._members

    def tools_for(self, names: Iterable[str]) -> list[Tool[TurnDeps]]:
        """The registered membership tools among `names`, in that order."""
        return [self._tools[name] for name in names if name in self._members]

    def workspace_tools(self, access: str) -> list[Tool[TurnDeps]]:
        """The workspace tools an agent with this persisted access gets (none for an unknown access)."""
        return list(self._workspace.get(access, ()))

    def skill_tools(self, skills: Sequence[object]) -> list[Tool[TurnDeps]]:
        """The skill tools, for an agent with at least one enabled skill; none otherwise."""
        return list(SKILL_TOOLS) if skills else []
