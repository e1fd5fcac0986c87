"""/api/approvals: the tool calls waiting for a person, and their answers (docs/approvals.md)."""

from __future__ import annotations

from typing import Annotated

import orjson
from fastapi import APIRouter, Path, Query, Response

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from popagent_gateway.deps import AgentRunnerStateStub
from popagent_gateway.dto.approvals import (
    ApprovalAnswer,
    ApprovalGrantListOut,
    ApprovalGrantOut,
    ApprovalListOut,
    ApprovalOut,
    ApprovalState,
)
from popagent_gateway.wire import from_message

router = APIRouter(tags=["approvals"])

ApprovalId = Annotated[str, Path(min_length=1, max_length=100)]
SessionId = Annotated[str, Path(min_length=1, max_length=200)]
ToolName = Annotated[str, Path(min_length=1, max_length=200)]
_DECISIONS = {
    "approve": pb.APPROVE_ONCE,
    "approve-session": pb.APPROVE_FOR_SESSION,
    "deny": pb.DENY,
}


def approval_out(approval: pb.Approval) -> ApprovalOut:
    fields = {name: getattr(approval, name) for name in ApprovalOut.model_fields if name != "arguments"}
    for name in ("scope", "answered_by", "answer_reason", "answered_at"):
        fields[name] = fields[name] or None
    return ApprovalOut.model_validate({**fields, "arguments": orjson.loads(approval.arguments_json or "{}")})


@router.get("/approvals", response_model=ApprovalListOut)
async def list_approvals(
    runner: AgentRunnerStateStub,
    state: Annotated[ApprovalState | None, Query()] = None,
    session_id: Annotated[str, Query(alias="sessionId", max_length=200)] = "",
) -> ApprovalListOut:
    """Tool approvals, newest first (at most 200); a pending one is listed while its turn runs."""
    response = await runner.ListApprovals(pb.ListApprovalsRequest(state=state or "", session_id=session_id))
    return ApprovalListOut(approvals=[approval_out(approval) for approval in response.approvals])


@router.post("/approvals/{approval_id}", response_model=ApprovalOut)
async def answer_approval(approval_id: ApprovalId, body: ApprovalAnswer, runner: AgentRunnerStateStub) -> ApprovalOut:
    """Approve once, approve for the rest of the session, or deny (with a reason the model reads).

    404 for an unknown approval; 409 when it was answered already or expired."""
    answered = await runner.AnswerApproval(
        pb.AnswerApprovalRequest(
            approval_id=approval_id, decision=_DECISIONS[body.decision], reason=body.reason, answered_by="api"
        )
    )
    return approval_out(answered)


@router.get("/sessions/{session_id}/approval-grants", response_model=ApprovalGrantListOut)
async def list_grants(session_id: SessionId, runner: AgentRunnerStateStub) -> ApprovalGrantListOut:
    """The tools allowed without asking for the rest of this session."""
    response = await runner.ListApprovalGrants(pb.ListApprovalGrantsRequest(session_id=session_id))
    return ApprovalGrantListOut(grants=[from_message(ApprovalGrantOut, grant) for grant in response.grants])


@router.delete("/sessions/{session_id}/approval-grants/{tool_name}", status_code=204)
async def revoke_grant(session_id: SessionId, tool_name: ToolName, runner: AgentRunnerStateStub) -> Response:
    """Revoke a session grant: the tool's next call in the session asks again. 404 when there is none."""
    await runner.RevokeApprovalGrant(pb.RevokeApprovalGrantRequest(session_id=session_id, tool_name=tool_name))
    return Response(status_code=204)
