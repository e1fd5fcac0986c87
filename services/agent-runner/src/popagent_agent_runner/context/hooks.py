"""The turn's lifecycle-hook dispatch points, bound to one session, turn and model.

Gate events (`UserPromptSubmit`, `SubagentStart`, `PreToolUse`, `Stop`) come back as a
decision; observational ones (`SessionStart`, `SubagentStop`, `PostToolUse`,
`PostToolUseFailure`, `StopFailure`) are fire-and-report: a failure is logged and never
changes the turn. The hooks client answers an event without a matching handler at once,
with no RPC. Free text in a detail is bounded so no event can exceed the service's cap.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from popagent_hooks_client.client import HookDecision, HooksClient
from popagent_hooks_client.events import Event

# Free text (prompts, responses, results) in one hook detail.
MAX_DETAIL_TEXT = 16 * 1024


def bounded(text: str, limit: int = MAX_DETAIL_TEXT) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


@dataclass(frozen=True)
class TurnHooks:
    client: HooksClient
    session_id: str
    turn_id: str
    model: str

    async def gate(
        self, event: Event, *, target: str = "", tool_call_id: str = "", detail: Mapping[str, Any]
    ) -> HookDecision:
        """A gate event's decision; the client applies the fail-closed rule when the service fails."""
        return await self._dispatch(event, target, tool_call_id, detail)

    async def observe(
        self, event: Event, *, target: str = "", tool_call_id: str = "", detail: Mapping[str, Any]
    ) -> None:
        # The client never raises a service error: a failed observational dispatch is logged there and passes.
        await self._dispatch(event, target, tool_call_id, detail)

    async def _dispatch(self, event: Event, target: str, tool_call_id: str, detail: Mapping[str, Any]) -> HookDecision:
        return await self.client.dispatch(
            event,
            session_id=self.session_id,
            turn_id=self.turn_id,
            tool_call_id=tool_call_id,
            model=self.model,
            target=target,
            detail=detail,
        )


def denied(decision: HookDecision, what: str) -> str:
    """What the model (or the user) is told about a denial."""
    reason = decision.reason or "no reason given"
    text = f"{what} was denied by a hook: {reason}"
    if decision.additional_context:
        text += f"\n{decision.additional_context}"
    return text
