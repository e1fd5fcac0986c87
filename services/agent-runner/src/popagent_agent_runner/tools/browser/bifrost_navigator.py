"""`bifrostNavigator`: one `browser_*` operation of the live BifrOSt catalog, in this chat session's tabs."""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from pydantic import Field
from pydantic_ai import BinaryContent, RunContext, Tool

from popagent.browser_bridge.v1 import navigator_pb2
from popagent_agent_runner.context.deps import TurnDeps
from popagent_agent_runner.tools.browser.calls import navigator, refusal_as_tool_failure

BROWSER_CALL_TIMEOUT_S = 90.0


async def bifrost_navigator(
    ctx: RunContext[TurnDeps],
    operation: Annotated[
        str,
        Field(
            pattern=r"^browser_[a-z_]{1,60}$",
            description="the exact browser_* operation, e.g. browser_navigate, browser_snapshot, browser_click, "
            "browser_type, browser_take_screenshot",
        ),
    ],
    arguments: Annotated[
        dict[str, Any],
        Field(
            description='the operation\'s arguments, e.g. {"url": ...} or {"target": "e5"} (refs from the latest snapshot)'
        ),
    ],
) -> list[Any]:
    """Drive this chat session's browser tabs through the BifrOSt browser: one `browser_*`
    operation with its arguments (an unknown operation answers with the list the browser offers).
    Take a `browser_snapshot` to get element refs (e5, f1e3) before clicking or typing. browser_tabs
    lists, opens, selects and closes this session's own tabs (popups its pages open included).
    Never type credentials: fill them with useBrowserSecret."""
    with refusal_as_tool_failure(f"{operation}"):
        answer = await navigator(ctx).Navigate(
            navigator_pb2.NavigateRequest(
                session_id=ctx.deps.turn.session_id,
                agent_id=ctx.deps.agent_id,
                browser_access=ctx.deps.browser_access,
                operation=operation,
                arguments_json=orjson.dumps(arguments).decode(),
            ),
            timeout=BROWSER_CALL_TIMEOUT_S,
        )
    summary: dict[str, Any] = {"operation": operation, "isError": answer.is_error, "content": []}
    files: list[BinaryContent] = []
    for part in answer.content:
        if part.kind == "image":
            summary["content"].append({"type": "image", "mimeType": part.mime_type, "bytes": len(part.data)})
            files.append(BinaryContent(data=part.data, media_type=part.mime_type or "image/png"))
        elif part.kind == "resource":
            summary["content"].append(
                {"type": "resource", "uri": part.uri, "mimeType": part.mime_type, "text": part.text}
            )
        else:
            summary["content"].append({"type": "text", "text": part.text})
    # The text goes to the model as the tool result, each image as an image part after it.
    return [summary, *files]


TOOL: Tool[TurnDeps] = Tool(bifrost_navigator, name="bifrostNavigator")
