"""`webFetch`: read one web page (http or https) as Markdown."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field
from pydantic_ai import RunContext, Tool, ToolFailed

from popagent_agent_runner.context.deps import TurnDeps
from popagent_agent_runner.web.page_fetcher import MAX_URL_CHARS
from popagent_core.errors import InvalidArgument, Unavailable


async def web_fetch(
    ctx: RunContext[TurnDeps],
    url: Annotated[str, Field(min_length=8, max_length=MAX_URL_CHARS, description="the http(s) URL to read")],
) -> dict[str, Any]:
    """Read one web page and get its content as Markdown, e.g. a search result, documentation
    page or changelog. Long pages are cut (`truncated` says so). Private and local network
    addresses are never fetched."""
    try:
        page = await ctx.deps.turn.web.fetcher.fetch(url)
    except (InvalidArgument, Unavailable) as exc:
        raise ToolFailed(f"webFetch of {url[:200]} failed: {exc}") from None
    return page.as_tool_result()


TOOL: Tool[TurnDeps] = Tool(web_fetch, name="webFetch")
