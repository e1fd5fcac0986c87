"""`webSearch`: look something up on the web through the self-hosted SearXNG instance."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field
from pydantic_ai import RunContext, Tool, ToolFailed

from popagent_agent_runner.context.deps import TurnDeps
from popagent_agent_runner.web.searxng import SearchQuery
from popagent_core.errors import Unavailable

Category = Literal["general", "news", "it", "science", "files", "images", "videos", "music", "map", "social media"]


async def web_search(
    ctx: RunContext[TurnDeps],
    query: Annotated[str, Field(min_length=1, max_length=400, description="what to search for")],
    categories: Annotated[list[Category] | None, Field(max_length=4, description="SearXNG categories")] = None,
    language: Annotated[
        str | None, Field(pattern=r"^[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8})?$|^all$", description="e.g. en, de-CH, all")
    ] = None,
    time_range: Literal["day", "week", "month", "year"] | None = None,
    page: Annotated[int, Field(ge=1, le=10)] = 1,
) -> dict[str, Any]:
    """Search the web. Use it for current external facts, documentation, changelogs, known issues
    and standards; cite the result URLs you rely on. Each result has a title, url, snippet,
    engine and date (when known)."""
    search = SearchQuery(query, tuple(dict.fromkeys(categories or ())), language, time_range, page)
    try:
        return await ctx.deps.turn.web.search.search(search)
    except Unavailable as exc:
        # A failed tool result the model reads (and the UI shows): the search is down, not the turn.
        raise ToolFailed(f"webSearch failed: {exc}") from None


TOOL: Tool[TurnDeps] = Tool(web_search, name="webSearch")
