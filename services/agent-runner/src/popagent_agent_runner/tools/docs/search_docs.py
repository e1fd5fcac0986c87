"""`searchDocs`: search the session's workspace documentation (its Markdown and added documents)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field
from pydantic_ai import RunContext, Tool, ToolFailed

from popagent_agent_runner.context.deps import TurnDeps
from popagent_core.errors import PopagentError

MAX_EXCERPT_CHARS = 1200


async def search_docs(
    ctx: RunContext[TurnDeps],
    query: Annotated[str, Field(min_length=1, max_length=400, description="a question or keywords")],
    k: Annotated[int, Field(ge=1, le=10, description="how many passages")] = 5,
    path_prefix: Annotated[
        str, Field(max_length=300, description="only documents whose path starts with this, e.g. docs/")
    ] = "",
) -> dict[str, Any]:
    """Search this workspace's documentation (its Markdown files and documents added to it) by meaning
    and by words. Use it before answering questions about how this project works, is configured or is
    deployed; cite the paths and sections you rely on. Each result has the file path, the heading path
    of its section, a relevance score and the passage."""
    docs = ctx.deps.turn.docs
    if docs is None:
        raise ToolFailed("searchDocs failed: documentation search is not available in this service")
    try:
        hits = await docs.search(ctx.deps.turn.workspace_id, query, k, path_prefix)
    except PopagentError as exc:
        # A failed tool result the model reads: no index, no embedding model or the gateway is down.
        raise ToolFailed(f"searchDocs failed: {exc}") from None
    return {
        "workspace": ctx.deps.turn.workspace_id,
        "results": [
            {
                "path": hit.path,
                "headingPath": list(hit.heading_path),
                "score": round(hit.score, 4),
                "text": hit.content if len(hit.content) <= MAX_EXCERPT_CHARS else hit.content[:MAX_EXCERPT_CHARS] + "…",
            }
            for hit in hits
        ],
    }


TOOL: Tool[TurnDeps] = Tool(search_docs, name="searchDocs")
