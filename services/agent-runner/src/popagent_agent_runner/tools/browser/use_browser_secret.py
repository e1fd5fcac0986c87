"""`useBrowserSecret`: fill a browser element with a stored secret, below the tool boundary.

The plaintext is resolved by browser-bridge from the secrets service and filled only when the
element's frame origin and its top page origin both equal the secret's binding; the model (and
the hooks, and the transcript) see only the name, the element ref, the origin and success.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field
from pydantic_ai import RunContext, Tool

from popagent.browser_bridge.v1 import navigator_pb2
from popagent_agent_runner.context.deps import TurnDeps
from popagent_agent_runner.memory.threads import USER_RESOURCE
from popagent_agent_runner.tools.browser.calls import navigator, refusal_as_tool_failure

SECRET_CALL_TIMEOUT_S = 60.0


async def use_browser_secret(
    ctx: RunContext[TurnDeps],
    name: Annotated[str, Field(min_length=1, max_length=200, description="the stored secret's name")],
    element: Annotated[
        str,
        Field(pattern=r"^(f[0-9]{1,4})?e[0-9]{1,6}$", description="the input's ref from the latest browser_snapshot"),
    ],
) -> dict[str, Any]:
    """Fill a password or token field with a stored secret, by the secret's name and the field's
    snapshot ref. It fills only on the exact origin the secret is bound to; you never see the value."""
    with refusal_as_tool_failure("useBrowserSecret"):
        answer = await navigator(ctx).UseSecret(
            navigator_pb2.UseSecretRequest(
                session_id=ctx.deps.turn.session_id,
                agent_id=ctx.deps.agent_id,
                browser_access=ctx.deps.browser_access,
                resource_id=USER_RESOURCE,
                name=name,
                element=element,
            ),
            timeout=SECRET_CALL_TIMEOUT_S,
        )
    return {"name": answer.name, "origin": answer.origin, "success": answer.success}


TOOL: Tool[TurnDeps] = Tool(use_browser_secret, name="useBrowserSecret")
