"""The hook audit of one session (docs/hooks.md, Audit)."""

from __future__ import annotations

from pydantic import Field

from popagent_gateway.dto import WireModel


class HookRunOut(WireModel):
    id: str
    event: str = Field(description='spec event name: "PreToolUse", "Stop", ...')
    handler_id: str
    outcome: str = Field(description='"pass", "deny", "modify", "continue" or "ask" (PreToolUse only)')
    failure_class: str | None = Field(
        description='"transport", "timeout", "malformed_response", "event_outcome"; null when the handler answered validly'
    )
    duration_ms: int
    session_id: str
    turn_id: str | None
    tool_call_id: str | None
    target: str | None
    event_id: str
    reason: str
    created_at: str
    signed: bool = Field(
        description="whether the request to the handler carried a webhook-signature (the handler has a secret)"
    )


class HookRunListOut(WireModel):
    runs: list[HookRunOut]
