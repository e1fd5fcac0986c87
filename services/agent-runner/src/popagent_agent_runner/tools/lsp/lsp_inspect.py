"""`mastra_workspace_lsp_inspect`: ask the workspace's language server about code (read-only).

A membership tool of every role (data migration 0008), offered to and answered for an agent
with workspace access (read-only or read-write), never one with none: the servers are the service's (`lsp/manager.py`), shared
by every turn and agent of the workspace; the files are read through the containment.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field
from pydantic_ai import RunContext, Tool, ToolDefinition, ToolFailed

from popagent_agent_runner.context.deps import TurnDeps
from popagent_agent_runner.lsp.inspection import Inspection, Inspector, Operation
from popagent_agent_runner.lsp.languages import LanguageServerUnavailable
from popagent_agent_runner.tools.workspace.file_tools import turn_hands
from popagent_agent_runner.workspace.paths import WorkspaceRefusal


async def lsp_inspect(
    ctx: RunContext[TurnDeps],
    operation: Operation,
    path: Annotated[
        str | None,
        Field(
            max_length=4096, description="file relative to the repository root, e.g. 'src/app.py' or 'ui/src/App.tsx'"
        ),
    ] = None,
    line: Annotated[
        int | None, Field(ge=1, description="1-based line (as mastra_workspace_read_file numbers it)")
    ] = None,
    character: Annotated[
        int | None, Field(ge=1, description="1-based column in that line; omitted: the line's first non-blank")
    ] = None,
    symbol: Annotated[
        str | None,
        Field(
            min_length=1,
            max_length=200,
            description="a symbol name instead of line/character, e.g. 'Shape.area'; searched in `path`, "
            "or in the whole repository when no path is given (then `language` says which server)",
        ),
    ] = None,
    language: Annotated[
        str | None, Field(max_length=20, description="python, typescript or javascript; only with a symbol and no path")
    ] = None,
) -> dict[str, Any]:
    """Inspect code with the repository's language server (Python: basedpyright; TypeScript and
    JavaScript: typescript-language-server). Operations: `hover` (type and docs), `definition`,
    `implementation`, `references` (at path + line/character, or at a symbol), `diagnostics`
    (type errors of a file) and `documentSymbols` (outline of a file). Locations come back as
    repository paths with 1-based line and character; locations in libraries (stdlib,
    site-packages, node_modules) as `library` references."""
    hands = turn_hands(ctx, write=False)
    servers = hands.hands.lsp
    if servers is None:
        raise ToolFailed("code inspection is not available in this service (no language servers)")
    query = Inspection(operation, path or None, line, character, symbol, language)
    try:
        return await Inspector(servers, hands.workspace_id, hands.repo()).run(query)
    except (WorkspaceRefusal, LanguageServerUnavailable) as exc:
        raise ToolFailed(f"mastra_workspace_lsp_inspect: {exc}") from None


async def offered(ctx: RunContext[TurnDeps], tool: ToolDefinition) -> ToolDefinition | None:
    """Offered only where it can answer: an agent with workspace access, in a turn with a workspace."""
    if ctx.deps.workspace_access == "none" or ctx.deps.turn.hands is None:
        return None
    return tool


TOOL: Tool[TurnDeps] = Tool(lsp_inspect, name="mastra_workspace_lsp_inspect", prepare=offered)
