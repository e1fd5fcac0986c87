"""What both browser tools do around their browser-bridge call: the turn's browser, and a refusal as the tool's failure."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from pydantic_ai import RunContext, ToolFailed

from popagent.browser_bridge.v1 import navigator_pb2_grpc
from popagent_agent_runner.context.deps import TurnDeps
from popagent_core.errors import PopagentError
from popagent_core.grpc_client import map_rpc_errors


def navigator(ctx: RunContext[TurnDeps]) -> navigator_pb2_grpc.BrowserNavigatorServiceStub:
    """The navigator of this turn's browser; the tool fails when browser settings disable it."""
    browser = ctx.deps.turn.browser
    if browser is None or not browser.enabled:
        raise ToolFailed("the browser is disabled in browser settings")
    return browser.navigator


@contextlib.contextmanager
def refusal_as_tool_failure(what: str) -> Iterator[None]:
    """A failed browser-bridge call becomes the tool's failure, which the model reads, naming `what`."""
    try:
        with map_rpc_errors():
            yield
    except PopagentError as exc:
        raise ToolFailed(f"{what} refused: {exc}") from None
