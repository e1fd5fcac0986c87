"""/api/workspaces: repository registrations under POPAGENT_WORKSPACE_ROOT, and workspace-wide session deletion."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from popagent_gateway.deps import AgentRunnerStateStub
from popagent_gateway.dto.sessions import DeletedOut
from popagent_gateway.dto.workspaces import (
    WORKSPACE_ID_PATTERN,
    WorkspaceCreate,
    WorkspaceListOut,
    WorkspaceOut,
    WorkspacePatch,
)
from popagent_gateway.wire import from_message

router = APIRouter(prefix="/workspaces", tags=["workspaces"])

# Not POPAGENT_GATEWAY_RPC_TIMEOUT_S: each session of the workspace goes through the full deletion
# lifecycle (SessionEnd hook, browser close) in turn, so the call lasts as long as that many deletions.
DELETE_SESSIONS_TIMEOUT_S = 600.0

WorkspaceId = Annotated[str, Path(pattern=WORKSPACE_ID_PATTERN, max_length=63)]


@router.get("", response_model=WorkspaceListOut)
async def list_workspaces(runner: AgentRunnerStateStub) -> WorkspaceListOut:
    """Registered repositories, the default (popagent) first."""
    response = await runner.ListWorkspaces(pb.ListWorkspacesRequest())
    return WorkspaceListOut(workspaces=[from_message(WorkspaceOut, w) for w in response.workspaces])


@router.post("", response_model=WorkspaceOut, status_code=201)
async def create_workspace(body: WorkspaceCreate, runner: AgentRunnerStateStub) -> WorkspaceOut:
    """Register a repository whose path is relative to the workspace root and resolves inside it."""
    workspace = await runner.CreateWorkspace(
        pb.CreateWorkspaceRequest(id=body.id or "", name=body.name, path=body.path, description=body.description),
    )
    return from_message(WorkspaceOut, workspace)


@router.patch("/{workspace_id}", response_model=WorkspaceOut)
async def update_workspace(
    workspace_id: WorkspaceId, body: WorkspacePatch, runner: AgentRunnerStateStub
) -> WorkspaceOut:
    """Rename a registration, describe it, or point it at another contained path."""
    workspace = await runner.UpdateWorkspace(pb.UpdateWorkspaceRequest(id=workspace_id, **body.changes()))
    return from_message(WorkspaceOut, workspace)


@router.delete("/{workspace_id}", status_code=204, response_class=Response)
async def delete_workspace(workspace_id: WorkspaceId, runner: AgentRunnerStateStub) -> Response:
    """Remove a registration (never files). Refused for the default and while sessions still use it."""
    await runner.DeleteWorkspace(pb.DeleteWorkspaceRequest(id=workspace_id))
    return Response(status_code=204)


@router.delete("/{workspace_id}/sessions", response_model=DeletedOut)
async def delete_workspace_sessions(workspace_id: WorkspaceId, runner: AgentRunnerStateStub) -> DeletedOut:
    """Permanently delete every active and archived chat of a workspace, each through the full deletion lifecycle."""
    response = await runner.DeleteWorkspaceSessions(
        pb.DeleteWorkspaceSessionsRequest(workspace_id=workspace_id), timeout=DELETE_SESSIONS_TIMEOUT_S
    )
    return DeletedOut(deleted=response.deleted)
