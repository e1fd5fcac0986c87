"""/api/sessions: list, create, load, export, optimistic save, rename/archive and permanent delete;
/api/search/messages: full-text search over what the chats said.

Answers are serialized straight from the service's messages: the stored AI SDK UI
messages travel as one JSON blob and are spliced into the answer without re-parsing.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Literal

import orjson
from fastapi import APIRouter, Path, Query, Request, Response
from pydantic import TypeAdapter

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from popagent.agent_runner.v1 import agent_runner_pb2_grpc
from popagent_gateway.deps import AgentRunnerStateStub, on_session_runner
from popagent_gateway.dto.sessions import (
    ID_PATTERN,
    MessageSearchOut,
    MessageSearchQuery,
    RevisionConflictOut,
    SessionCreate,
    SessionListOut,
    SessionListQuery,
    SessionOut,
    SessionPatch,
    SessionSave,
    SessionSummary,
    UIMessage,
    summary_dict,
)
from popagent_gateway.export import attachment, file_name, markdown_of
from popagent_gateway.wire import json_response

router = APIRouter(tags=["sessions"])

# Not POPAGENT_GATEWAY_RPC_TIMEOUT_S: permanent deletion waits for the session's SessionEnd hook
# (bounded by the hooks service, not by a plain lookup's deadline) and the browser close.
DELETE_TIMEOUT_S = 60.0

SessionId = Annotated[str, Path(pattern=ID_PATTERN, max_length=128)]
# Serializes validated messages in one Rust pass for storage.
_ADAPTER = TypeAdapter(list[UIMessage])


def session_json(session: pb.Session) -> bytes:
    """The full session (summary, messages, queued turns) without parsing the stored messages."""
    head = orjson.dumps(summary_dict(session))
    queued = b",".join(
        b'{"turnId":%s,"message":%s,"queuedAt":%s}'
        % (orjson.dumps(turn.turn_id), turn.message_json.encode(), orjson.dumps(turn.queued_at))
        for turn in session.queued_turns
    )
    versions = orjson.dumps(
        [{"messageId": v.message_id, "versions": v.versions, "shown": v.shown} for v in session.message_versions]
    )
    return (
        head[:-1]
        + b',"messages":'
        + (session.messages_json or b"[]")
        + b',"queuedTurns":['
        + queued
        + b'],"messageVersions":'
        + versions
        + b"}"
    )


def _messages_json(messages: list[UIMessage]) -> bytes:
    return _ADAPTER.dump_json(messages, exclude_unset=True)


@router.get("/sessions", response_model=SessionListOut)
async def list_sessions(runner: AgentRunnerStateStub, query: Annotated[SessionListQuery, Query()]) -> Response:
    """Active (or archived) sessions, most recently updated first, at most 200."""
    response = await runner.ListSessions(
        pb.ListSessionsRequest(archived=query.archived, workspace_id=query.workspace_id or "")
    )
    return json_response({"sessions": [summary_dict(s) for s in response.sessions]})


@router.get("/search/messages", response_model=MessageSearchOut)
async def search_messages(runner: AgentRunnerStateStub, query: Annotated[MessageSearchQuery, Query()]) -> Response:
    """Chat messages whose text matches `q`, best first, each with its session and an excerpt."""
    found = await runner.SearchMessages(pb.SearchMessagesRequest(query=query.q, limit=query.limit))
    return json_response(
        {
            "matches": [
                {
                    "sessionId": m.session_id,
                    "title": m.title,
                    "archived": m.archived,
                    "updatedAt": m.updated_at,
                    "messageId": m.message_id,
                    "role": m.role,
                    "createdAt": m.created_at,
                    "excerpt": m.excerpt,
                }
                for m in found.matches
            ]
        }
    )


@router.post("/sessions", response_model=SessionSummary, status_code=201)
async def create_session(body: SessionCreate, request: Request) -> Response:
    """Create an empty session (revision 0) in a workspace (default: popagent)."""
    return json_response(summary_dict(await new_session(body, request)), status_code=201)


async def new_session(body: SessionCreate, request: Request) -> pb.Session:
    """The created session; also the MCP `chat` tool's, for a chat that names none."""
    # The id is chosen here so the creation goes to the worker the session's turns will go to.
    session_id = body.id or str(uuid.uuid4())
    create = pb.CreateSessionRequest(id=session_id, title=body.title, workspace_id=body.workspace_id or "")
    return await on_session_runner(
        request,
        session_id,
        agent_runner_pb2_grpc.AgentRunnerStateServiceStub,
        lambda runner: runner.CreateSession(create),
    )


@router.get("/sessions/{session_id}", response_model=SessionOut)
async def get_session(session_id: SessionId, runner: AgentRunnerStateStub) -> Response:
    """Load a session: metadata, revision and its AI SDK UI messages."""
    session = await runner.GetSession(pb.GetSessionRequest(id=session_id))
    return Response(session_json(session), media_type="application/json")


@router.post("/sessions/{session_id}/messages/{message_id}/versions/{version}", response_model=SessionOut)
async def show_message_version(
    session_id: SessionId,
    message_id: Annotated[str, Path(min_length=1, max_length=200, description="the edited user message")],
    version: Annotated[int, Path(ge=1, le=10_000, description="the version to show, from 1")],
    runner: AgentRunnerStateStub,
) -> Response:
    """Show another version of an edited user message: the chat from that message on becomes that
    version's branch (the one shown until now is kept). 409 while a turn runs or waits on the chat."""
    session = await runner.ShowMessageVersion(
        pb.ShowMessageVersionRequest(session_id=session_id, message_id=message_id, version=version)
    )
    return Response(session_json(session), media_type="application/json")


@router.get(
    "/sessions/{session_id}/export",
    response_class=Response,
    responses={
        200: {
            "description": "The session as a file to download",
            "content": {"text/markdown": {"schema": {"type": "string"}}, "application/json": {}},
        }
    },
)
async def export_session(
    session_id: SessionId,
    runner: AgentRunnerStateStub,
    format: Annotated[
        Literal["markdown", "json"], Query(description="markdown: the conversation; json: the session")
    ] = "markdown",
) -> Response:
    """Download a session: the conversation as Markdown, or the whole session as JSON (what GET answers)."""
    session = await runner.GetSession(pb.GetSessionRequest(id=session_id))
    body = session_json(session)
    if format == "json":
        name, media_type = file_name(summary_dict(session), "json"), "application/json"
    else:
        body = markdown_of(orjson.loads(body)).encode()
        name, media_type = file_name(summary_dict(session), "md"), "text/markdown; charset=utf-8"
    return Response(body, media_type=media_type, headers={"content-disposition": attachment(name)})


@router.put(
    "/sessions/{session_id}",
    response_model=SessionSummary,
    responses={409: {"model": RevisionConflictOut, "description": "stale revision; the body has the server copy"}},
)
async def save_session(session_id: SessionId, body: SessionSave, runner: AgentRunnerStateStub) -> Response:
    """Save the title and messages. Send the revision you loaded; a stale one answers 409 with the current copy."""
    request = pb.SaveSessionRequest(
        id=session_id,
        revision=body.revision,
        messages_json=_messages_json(body.messages),
        message_count=len(body.messages),
    )
    if body.title is not None:
        request.title = body.title
    response = await runner.SaveSession(request)
    if response.conflict:
        conflict = b'{"error":"revision conflict","session":' + session_json(response.session) + b"}"
        return Response(conflict, status_code=409, media_type="application/json")
    return json_response(summary_dict(response.session))


@router.patch("/sessions/{session_id}", response_model=SessionSummary)
async def update_session(session_id: SessionId, body: SessionPatch, runner: AgentRunnerStateStub) -> Response:
    """Rename (the title then survives later saves), archive/restore, or set the double-texting policy.
    The revision does not change."""
    request = pb.UpdateSessionRequest(id=session_id)
    if body.title is not None:
        request.title = body.title
    if body.archived is not None:
        request.archived = body.archived
    if body.double_texting is not None:
        request.double_texting = body.double_texting
    session = await runner.UpdateSession(request)
    return json_response(summary_dict(session))


@router.delete("/sessions/{session_id}", status_code=204, response_class=Response)
async def delete_session(session_id: SessionId, runner: AgentRunnerStateStub) -> Response:
    """Permanently delete a session: SessionEnd hook, browser close, thread data, hook audit, then the row."""
    await runner.DeleteSession(pb.DeleteSessionRequest(id=session_id), timeout=DELETE_TIMEOUT_S)
    return Response(status_code=204)
