"""The approval gate every tool call of a turn passes, after its PreToolUse hooks (docs/approvals.md).

    await gate.admit(call, arguments, hook_decision)    # returns: the call may run; ToolFailed: it may not
    with gate.running(call):                             # an approved call runs at most once
        result = await handler(args)

A call asks a person when its agent's policy says `ask` or a PreToolUse hook answered `ask`, unless
its tool was allowed for the rest of the session. Asking stores an approval (keyed by the call), sends
the AI SDK `tool-approval-request`, marks the turn as waiting and waits for the answer, polling the
record (any runner may take the answer). The turn keeps its lease meanwhile, so a runner that dies
while it waits hands the turn to another runner, which finds the approval and waits on it, or runs
the call if it was approved, without asking again. A denial, an expiry, or an approval that cannot
be read is a denial: the model is told the reason and the call never runs. An approved call runs
after its claim (`not_started` -> `started`) succeeds; a call whose claim fails started on a runner
that died, so it is reported interrupted rather than run twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic_ai import ToolFailed

from popagent_agent_runner.approvals.policy import Decision, Policy
from popagent_agent_runner.approvals.store import Approval, ApprovalStore
from popagent_agent_runner.context.events import TurnOutput
from popagent_core.redaction import redact_tool_detail
from popagent_hooks_client.client import HookDecision
from popagent_hooks_client.events import Outcome

logger = logging.getLogger(__name__)

POLL_S = 0.5
# Reported for a call approved on a runner that died while it ran (the call is not run twice).
INTERRUPTED_APPROVED_TEXT = (
    "This approved tool call was interrupted: the agent-runner running it stopped before its result was "
    "stored, so it may or may not have taken effect. It is not run again."
)


def denial_text(tool_name: str, approval: Approval) -> str:
    reason = approval.answer_reason or "no reason given"
    if approval.state == "expired":
        return f"The {tool_name} call was not approved in time and did not run: {reason}"
    return f"The user denied the {tool_name} call, so it did not run. Their reason: {reason}"


@dataclass
class ApprovalGate:
    """One per process; `for_turn` binds it to a turn's session, turn id and output."""

    store: ApprovalStore
    timeout_s: float
    poll_s: float = POLL_S

    def for_turn(self, session_id: str, turn_id: str, output: TurnOutput) -> TurnApprovals:
        return TurnApprovals(self, session_id, turn_id, output)


@dataclass
class TurnApprovals:
    gate: ApprovalGate
    session_id: str
    turn_id: str
    output: TurnOutput
    # Approved calls of this turn, by tool call id: the approval their run must claim.
    approved: dict[str, str] = field(default_factory=dict[str, str])
    _waiting: int = 0

    @property
    def store(self) -> ApprovalStore:
        return self.gate.store

    async def admit(
        self,
        *,
        agent_id: str,
        policy: Policy,
        specialists: frozenset[str],
        tool_name: str,
        tool_call_id: str,
        arguments: dict[str, Any],
        hook: HookDecision,
    ) -> None:
        """Return when the call may run; raise ToolFailed (the model reads why) when it may not."""
        known = await self.store.for_call(self.turn_id, tool_call_id)
        if known is not None:
            # Asked before this runner took the turn over: never asked again.
            await self._settle(known, tool_name, arguments)
            return
        verdict = policy.decide(tool_name, arguments, specialists=specialists)
        if verdict.decision is Decision.DENY:
            raise ToolFailed(f"The {tool_name} call was denied by {verdict.reason}.")
        if hook.outcome is Outcome.ASK:
            reason = hook.reason or f"hook {hook.decided_by} asks for approval"
            asked_by = f"hook:{hook.decided_by}"
        elif verdict.decision is Decision.ASK:
            reason, asked_by = f"Asked by {verdict.reason}.", "policy"
        else:
            return
        if await self.store.granted(self.session_id, tool_name):
            return
        approval = await self.store.ask(
            approval_id=f"appr-{uuid.uuid4().hex}",
            session_id=self.session_id,
            turn_id=self.turn_id,
            tool_call_id=tool_call_id,
            agent_id=agent_id,
            tool_name=tool_name,
            arguments=redact_tool_detail(tool_name, {"arguments": arguments})["arguments"],
            reason=reason,
            asked_by=asked_by,
            expires_in_s=self.gate.timeout_s,
        )
        await self._settle(approval, tool_name, arguments)

    async def _settle(self, approval: Approval, tool_name: str, arguments: dict[str, Any]) -> None:
        if approval.state == "pending":
            self.output.tool_approval_request(approval.tool_call_id, tool_name, arguments, approval.id, approval.reason)
            approval = await self._answer_of(approval)
        if approval.state == "approved":
            self.output.tool_approved(approval.tool_call_id, approval.id)
            self.approved[approval.tool_call_id] = approval.id
            return
        if approval.state not in ("denied", "expired"):
            # An answer that cannot be read is a denial.
            logger.warning("an approval in an unknown state counts as denied", extra={"approval_id": approval.id})
        text = denial_text(tool_name, approval)
        self.output.tool_denied(approval.tool_call_id, tool_name, arguments, approval.id, text)
        raise ToolFailed(text)

    async def _answer_of(self, approval: Approval) -> Approval:
        self._waiting += 1
        if self._waiting == 1:
            await self.store.waiting(self.turn_id, True)
        try:
            while True:
                current = await self.store.get(approval.id)
                if current.state != "pending":
                    return current
                if current.expires_at <= datetime.now(UTC):
                    return await self.store.expire(approval.id) or await self.store.get(approval.id)
                await asyncio.sleep(self.gate.poll_s)
        finally:
            self._waiting -= 1
            if self._waiting == 0:
                with contextlib.suppress(Exception):
                    await asyncio.shield(self.store.waiting(self.turn_id, False))

    async def claim(self, tool_call_id: str) -> str | None:
        """Right before an admitted call runs: the approval it runs under (None: it needed none).
        ToolFailed when the approved call started already, on a runner that died: it does not run twice."""
        approval_id = self.approved.pop(tool_call_id, None)
        if approval_id is not None and not await self.store.claim(approval_id):
            raise ToolFailed(INTERRUPTED_APPROVED_TEXT)
        return approval_id

    async def ran(self, approval_id: str, outcome: dict[str, Any]) -> None:
        """The approved call's outcome, for a runner that takes the turn over before its next step is stored."""
        await self.store.finished(approval_id, outcome)
