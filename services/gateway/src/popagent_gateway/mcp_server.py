"""popagent as an MCP server at /mcp (streamable HTTP, docs/interop.md).

Each tool is a thin wrapper over what the equivalent /api route calls: the same gRPC stubs, DTOs and
route helpers, so an MCP client is refused and answered as an HTTP client is. The server is
stateless (no MCP session kept between requests), as the gateway is: any gateway replica answers any
request. The API key is checked by `ApiKeyMiddleware` (bounded.py) before a request gets here, and
again here, as the /api routes' dependency checks it a second time.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import inspect
import re
import uuid
from collections.abc import Iterator
from typing import Annotated, Any, Literal, cast

import grpc
import orjson
from mcp.server.context import ServerRequestContext
from mcp.server.elicitation import render_elicitation_schema
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    InputRequiredResult,
    ListResourcesResult,
    PaginatedRequestParams,
    Resource,
    ToolAnnotations,
)
from pydantic import BaseModel, Field
from starlette.requests import Request

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from popagent.agent_runner.v1 import agent_runner_pb2_grpc
from popagent.agent_runner.v1 import documents_pb2 as docs_pb
from popagent_gateway.chat_turns import FollowedTurn, follow_turn, refusal_text, start_chat_turn
from popagent_gateway.deps import get_agent_runner_state, get_model_catalog, get_tasks
from popagent_gateway.dto.approvals import ApprovalAnswer
from popagent_gateway.dto.documents import DocumentSearch
from popagent_gateway.dto.sessions import ID_PATTERN, summary_dict
from popagent_gateway.dto.tasks import MAX_PROMPT_CHARS, TaskCreate
from popagent_gateway.dto.workspaces import WORKSPACE_ID_PATTERN
from popagent_gateway.errors import client_message
from popagent_gateway.export import markdown_of
from popagent_gateway.routes import agents, approvals, chat, documents, sessions, tasks
from popagent_gateway.routes.documents import DOCUMENT_ID_REGEX
from popagent_gateway.streaming import PendingCheck

DEFAULT_WORKSPACE = "popagent"

SessionId = Annotated[str, Field(pattern=ID_PATTERN, max_length=128, description="a session's id")]
WorkspaceId = Annotated[str, Field(pattern=WORKSPACE_ID_PATTERN, max_length=63, description="a workspace's id")]
Prompt = Annotated[str, Field(min_length=1, max_length=MAX_PROMPT_CHARS, description="what to ask popagent")]
Model = Annotated[
    str | None, Field(min_length=1, max_length=200, description="a model of the catalog; omitted: the default model")
]


@contextlib.contextmanager
def refusals_as_tool_errors() -> Iterator[None]:
    """A service's or a DTO's refusal as an MCP tool error (isError) with the text an /api client reads
    for it, never a crash: the SDK would hide an unexpected exception's text entirely."""
    try:
        yield
    except Exception as exc:
        text = refusal_text(exc)
        if text is None:
            raise
        raise ToolError(text) from None


@contextlib.contextmanager
def refusals_as_resource_errors() -> Iterator[None]:
    """A refusal while reading a resource as the SDK's resource error with the text an /api client reads
    for it: not found as `ResourceNotFoundError` (-32602), others as `ResourceError` (-32603)."""
    try:
        yield
    except grpc.aio.AioRpcError as exc:
        text = client_message(exc.code(), exc.details() or "")
        if exc.code() is grpc.StatusCode.NOT_FOUND:
            raise ResourceNotFoundError(text) from None
        raise ResourceError(text) from None


def http_request(ctx: Context) -> Request:
    """The HTTP request that carried this MCP request: its app holds the gateway's channels."""
    request = ctx.request_context.request
    if not isinstance(request, Request):
        raise ToolError("popagent's MCP tools are served over streamable HTTP only")
    return request


def as_json(value: BaseModel | dict[str, Any]) -> str:
    """A tool's answer: the JSON the equivalent /api route answers."""
    data = value.model_dump(mode="json", by_alias=True) if isinstance(value, BaseModel) else value
    return orjson.dumps(data).decode()


async def list_agents(ctx: Context) -> str:
    """The supervisor and its specialists with their settings and tools (as GET /api/agents)."""
    request = http_request(ctx)
    with refusals_as_tool_errors():
        listed = await agents.list_agents(await get_agent_runner_state(request), await get_model_catalog(request))
    return as_json(listed)


async def list_sessions(
    ctx: Context,
    archived: Annotated[bool, Field(description="true: the archived sessions instead of the active ones")] = False,
    workspace_id: Annotated[WorkspaceId | None, Field(description="only this workspace's sessions")] = None,
) -> str:
    """Chat sessions, most recently updated first, at most 200 (as GET /api/sessions)."""
    runner = await get_agent_runner_state(http_request(ctx))
    with refusals_as_tool_errors():
        listed = await runner.ListSessions(pb.ListSessionsRequest(archived=archived, workspace_id=workspace_id or ""))
    return as_json({"sessions": [summary_dict(session) for session in listed.sessions]})


async def session_transcript(ctx: Context, session_id: str) -> str:
    """The session's conversation as Markdown (what GET /api/sessions/{id}/export answers)."""
    runner = await get_agent_runner_state(http_request(ctx))
    session = await runner.GetSession(pb.GetSessionRequest(id=session_id))
    return markdown_of(orjson.loads(sessions.session_json(session)))


async def get_session(ctx: Context, session_id: SessionId) -> str:
    """One session's conversation as text (Markdown): every message under who said it, tool calls with
    their input and output (as GET /api/sessions/{id}, exported as GET /api/sessions/{id}/export does)."""
    with refusals_as_tool_errors():
        return await session_transcript(ctx, session_id)


async def session_resource(ctx: Context, session_id: str) -> str:
    """The session resource: its transcript; an unknown session is the SDK's not-found error (-32602)."""
    with refusals_as_resource_errors():
        return await session_transcript(ctx, session_id)


DOCUMENT_URI = "popagent://workspaces/{workspace_id}/documents/{document_id}"
DOCUMENT_MIME_TYPE = "text/markdown"
# resources/list: documents per page, and the longest cursor taken back (a workspace id and a path).
RESOURCES_PAGE = 100
MAX_CURSOR_CHARS = 2048


async def workspace_document(ctx: Context, workspace_id: str, document_id: str) -> str:
    """A workspace document's content (as GET /api/workspaces/{id}/documents/{documentId} answers it):
    agent-runner's copy of a workspace file taken by its last index run, or an added document."""
    if not re.fullmatch(WORKSPACE_ID_PATTERN, workspace_id) or not re.fullmatch(DOCUMENT_ID_REGEX, document_id):
        raise ResourceNotFoundError(f"no document {document_id[:80]!r} in workspace {workspace_id[:80]!r}")
    docs = await documents.get_documents(http_request(ctx))
    with refusals_as_resource_errors():
        document = await docs.GetDocument(docs_pb.GetDocumentRequest(workspace_id=workspace_id, id=document_id))
    return document.content


class DocumentsCursor(BaseModel):
    """Where the next page of resources/list starts: after `path` in workspace `workspace` (workspaces in
    id order, each one's documents in path order). Opaque to the client (base64url of this JSON)."""

    workspace: str
    path: str

    def encoded(self) -> str:
        return base64.urlsafe_b64encode(self.model_dump_json().encode()).decode()

    @classmethod
    def decoded(cls, cursor: str) -> DocumentsCursor:
        try:
            if len(cursor) > MAX_CURSOR_CHARS:
                raise ValueError(cursor)
            return cls.model_validate_json(base64.urlsafe_b64decode(cursor.encode("ascii")))
        except (ValueError, binascii.Error):
            # pydantic's ValidationError and UnicodeEncodeError are ValueErrors too.
            raise MCPError(
                INVALID_PARAMS, "invalid cursor: give back the nextCursor of a resources/list answer"
            ) from None


def document_resource(document: docs_pb.Document) -> Resource:
    where = "a file of the workspace, as last indexed" if document.origin == "file" else "an added document"
    return Resource(
        uri=DOCUMENT_URI.format(workspace_id=document.workspace_id, document_id=document.id),
        name=document.path,
        title=document.title or None,
        description=f"{where} (workspace {document.workspace_id})",
        mime_type=DOCUMENT_MIME_TYPE,
    )


async def document_resources(request: Request, cursor: str | None) -> ListResourcesResult:
    """One page of the registered workspaces' documents, at most RESOURCES_PAGE of them."""
    start = DocumentsCursor.decoded(cursor) if cursor is not None else None
    state = await get_agent_runner_state(request)
    docs = await documents.get_documents(request)
    listed: list[Resource] = []
    workspaces = sorted(
        workspace.id for workspace in (await state.ListWorkspaces(pb.ListWorkspacesRequest())).workspaces
    )
    for workspace_id in workspaces:
        if start is not None and workspace_id < start.workspace:
            continue
        after = start.path if start is not None and workspace_id == start.workspace else ""
        try:
            page = await docs.ListDocuments(
                docs_pb.ListDocumentsRequest(
                    workspace_id=workspace_id, after_path=after, limit=RESOURCES_PAGE - len(listed)
                )
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() is grpc.StatusCode.NOT_FOUND:
                continue  # unregistered since it was listed
            raise
        listed.extend(document_resource(document) for document in page.documents)
        if len(listed) == RESOURCES_PAGE:
            last = page.documents[-1]
            return ListResourcesResult(
                resources=listed, next_cursor=DocumentsCursor(workspace=workspace_id, path=last.path).encoded()
            )
    return ListResourcesResult(resources=listed)


async def search_docs(
    ctx: Context,
    query: Annotated[str, Field(min_length=1, max_length=2000, description="what to look for")],
    workspace_id: WorkspaceId = DEFAULT_WORKSPACE,
    k: Annotated[int, Field(ge=1, le=50, description="how many passages at most")] = 5,
    path_prefix: Annotated[str, Field(max_length=1024, description="only documents whose path starts with this")] = "",
) -> str:
    """Search a workspace's documentation (hybrid search): the best passages with their document path,
    heading path and score (as POST /api/workspaces/{id}/documents/search)."""
    request = http_request(ctx)
    with refusals_as_tool_errors():
        body = DocumentSearch.model_validate({"query": query, "k": k, "pathPrefix": path_prefix})
        found = await documents.search_documents(workspace_id, body, await documents.get_documents(request))
    return as_json(found)


async def run_task(
    ctx: Context,
    prompt: Annotated[Prompt, Field(description="what the task is to do")],
    workspace_id: WorkspaceId = DEFAULT_WORKSPACE,
    model: Model = None,
    session_id: Annotated[
        SessionId | None, Field(description="run the task's turns in this session; omitted: a thread of its own")
    ] = None,
    max_attempts: Annotated[int, Field(ge=1, le=10, description="attempts before the task fails")] = 3,
) -> str:
    """Queue a background task; it runs on its own (as POST /api/tasks). Follow it with get_task."""
    stub = await get_tasks(http_request(ctx))
    with refusals_as_tool_errors():
        body = TaskCreate.model_validate(
            {
                "prompt": prompt,
                "workspaceId": workspace_id,
                "model": model or "",
                "sessionId": session_id or "",
                "maxAttempts": max_attempts,
            }
        )
        created = await tasks.create_task(body, stub)
    return as_json(created)


async def get_task(
    ctx: Context, task_id: Annotated[str, Field(min_length=1, max_length=64, description="the task's id")]
) -> str:
    """One background task: its status, attempts, outcome or error (as GET /api/tasks/{id})."""
    stub = await get_tasks(http_request(ctx))
    with refusals_as_tool_errors():
        task = await tasks.get_task(task_id, stub)
    return as_json(task)


async def chat_turn(
    ctx: Context,
    prompt: Prompt,
    session_id: Annotated[
        SessionId | None, Field(description="continue this session; omitted: a new session is created")
    ] = None,
    model: Model = None,
    workspace_id: Annotated[
        WorkspaceId | None, Field(description="the workspace the turn works in; omitted: the session's")
    ] = None,
) -> str | InputRequiredResult:
    """Ask popagent (its supervisor agent, which may delegate and use tools) and wait for the answer, as a
    chat in the popagent UI does (POST /api/chat). Text is sent as progress notifications while it
    arrives. Answers JSON: `sessionId`, `turnId`, `status` ("completed", or "waiting-for-approval" with
    `approvals`: a tool call waits for a person to approve it in the popagent UI or with POST
    /api/approvals/{approvalId}; the turn goes on once it is answered) and `answer`, the reply's text.
    A client that can answer elicitations (protocol 2026-07-28) is asked for the approval instead, and
    the turn goes on to its answer."""
    if ctx.request_state is not None:
        # The same call again, carrying the answers to the approvals it asked (approval_questions).
        return await go_on_with_answers(ctx, AskedApprovals.model_validate_json(ctx.request_state))
    request = http_request(ctx)
    state = await get_agent_runner_state(request)
    new = session_id is None
    session_id = session_id or str(uuid.uuid4())
    followed = FollowedTurn()
    with refusals_as_tool_errors():
        started, warning = await start_chat_turn(
            request,
            prompt,
            session_id=session_id,
            create_session=new,
            model=model,
            workspace_id=workspace_id,
            message_id_prefix="mcp",
        )
        waiting = await follow_with_progress(ctx, started, chat.pending_check(state, session_id), session_id, followed)
    return turn_outcome(ctx, followed, waiting, session_id, AskedApprovals(session_id=session_id), warning)


async def follow_with_progress(
    ctx: Context, started: chat.StartedTurn, pending: PendingCheck, session_id: str, followed: FollowedTurn
) -> bool:
    """follow_turn with the turn's text sent as progress; a broken stream is a tool error (the turn may go on)."""

    async def report(followed: FollowedTurn, added: str) -> None:
        await ctx.report_progress(followed.received_chars, message=added)

    try:
        return await follow_turn(started, pending, report, followed)
    except grpc.aio.AioRpcError as exc:
        raise ToolError(
            f"{client_message(exc.code(), exc.details() or '')} The turn may go on: read session "
            f"{session_id} with get_session later."
        ) from None


def turn_outcome(
    ctx: Context,
    followed: FollowedTurn,
    waiting: bool,
    session_id: str,
    asked: AskedApprovals,
    warning: str | None = None,
) -> str | InputRequiredResult:
    """The chat tool's answer once the turn ended or waits: the approvals it waits for are asked through
    the client when it can answer them (and was not asked them yet), else listed in the answer."""
    if followed.failure is not None:
        raise ToolError(f"the turn failed: {followed.failure} (session {session_id})")
    outcome: dict[str, Any] = {
        "sessionId": session_id,
        "turnId": followed.turn_id,
        "status": "waiting-for-approval" if waiting else "completed",
        "answer": followed.answer,
    }
    if waiting:
        outcome["approvals"] = followed.waiting_approvals
        unasked = [a for a in followed.waiting_approvals if a["approvalId"] not in asked.approval_ids]
        if unasked and can_elicit(ctx):
            return approval_questions(unasked, asked)
    if warning:
        outcome["warning"] = warning
    return as_json(outcome)


class ApprovalQuestion(BaseModel):
    """The form a waiting tool call is asked with: POST /api/approvals/{approvalId}'s choices."""

    decision: Literal["allow", "allow for this session", "deny"] = Field(
        description="allow the call once, allow the tool for the rest of the session, or deny it"
    )
    reason: str = Field(default="", max_length=2000, description="for a denial: what the model is told")


APPROVAL_SCHEMA = render_elicitation_schema(ApprovalQuestion)
DECISIONS: dict[str, Literal["approve", "approve-session", "deny"]] = {
    "allow": "approve",
    "allow for this session": "approve-session",
    "deny": "deny",
}


class AskedApprovals(BaseModel):
    """What a call that asked for approvals carries to its next round (`requestState`). The SDK seals it
    with a key of this process (its default), so that round must reach this gateway process."""

    session_id: str
    approval_ids: list[str] = Field(default_factory=list[str])


def can_elicit(ctx: Context) -> bool:
    """Whether this call can ask its client: one that declared form elicitation (a bare `elicitation: {}`
    declares form, as before modes existed). Only a 2026-07-28 request carries its client's capabilities:
    those of a handshake-era client were declared on its `initialize` request, which a stateless server
    does not keep, and at those revisions asking would be a request to the client, which the stateless
    transport has no channel for (the SDK raises NoBackChannelError). Those clients get the approval ids."""
    capabilities = ctx.client_capabilities
    elicitation = capabilities.elicitation if capabilities is not None else None
    return elicitation is not None and (elicitation.form is not None or elicitation.url is None)


def approval_questions(waiting: list[dict[str, str]], asked: AskedApprovals) -> InputRequiredResult:
    """Ask the client about each waiting tool call, keyed by its approval id."""
    questions: dict[str, ElicitRequest] = {}
    for approval in waiting:
        tool, reason = approval["toolName"], approval["reason"]
        message = f"Allow {tool} ({reason})?" if reason else f"Allow {tool}?"
        form = ElicitRequestFormParams(message=message, requested_schema=APPROVAL_SCHEMA)
        questions[approval["approvalId"]] = ElicitRequest(params=form)
    state = AskedApprovals(session_id=asked.session_id, approval_ids=[*asked.approval_ids, *questions])
    return InputRequiredResult(input_requests=dict(questions), request_state=state.model_dump_json())


async def go_on_with_answers(ctx: Context, asked: AskedApprovals) -> str | InputRequiredResult:
    """Answer the approvals the client accepted to answer, as POST /api/approvals/{approvalId} does, and
    follow the session's turn on. One declined or dismissed stays waiting (it is not asked again)."""
    request = http_request(ctx)
    state = await get_agent_runner_state(request)
    followed = FollowedTurn()
    with refusals_as_tool_errors():
        for approval_id, response in (ctx.input_responses or {}).items():
            # Only what this call asked (the sealed state says which): the client names the keys.
            if approval_id in asked.approval_ids and isinstance(response, ElicitResult) and response.action == "accept":
                await answer_approval(approval_id, ApprovalQuestion.model_validate(response.content or {}), state)
        call, batches, first = await chat.followed_turn(request, asked.session_id)
        if first is None:
            raise ToolError(f"no turn runs on session {asked.session_id} any more: read it with get_session")
        # follow_turn reads a followed turn as a started one: it only reads the batches and cancels the call.
        followed_turn = cast(chat.StartedTurn, (call, batches, first))
        pending = chat.pending_check(state, asked.session_id)
        waiting = await follow_with_progress(ctx, followed_turn, pending, asked.session_id, followed)
    return turn_outcome(ctx, followed, waiting, asked.session_id, asked)


async def answer_approval(
    approval_id: str, question: ApprovalQuestion, state: agent_runner_pb2_grpc.AgentRunnerStateServiceStub
) -> None:
    """The route's answer; one answered already elsewhere (the UI, the API) keeps its first answer."""
    try:
        await approvals.answer_approval(
            approval_id, ApprovalAnswer(decision=DECISIONS[question.decision], reason=question.reason), state
        )
    except grpc.aio.AioRpcError as exc:
        if exc.code() is not grpc.StatusCode.FAILED_PRECONDITION:
            raise


READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
# Starts work that goes on by itself (a turn, a task), which may use the web.
STARTS_WORK = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=True)
TOOLS = {
    "list_agents": (list_agents, READ_ONLY),
    "list_sessions": (list_sessions, READ_ONLY),
    "get_session": (get_session, READ_ONLY),
    "search_docs": (search_docs, READ_ONLY),
    "run_task": (run_task, STARTS_WORK),
    "get_task": (get_task, READ_ONLY),
    "chat": (chat_turn, STARTS_WORK),
}


class PopagentMcpServer(MCPServer):
    """The SDK's server, with resources/list answering the registered workspaces' documents page by page
    (the SDK's own lists only fixed resources, all at once)."""

    async def _handle_list_resources(
        self, ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListResourcesResult:
        request = ctx.request
        if not isinstance(request, Request):
            raise MCPError(INVALID_PARAMS, "popagent's MCP resources are served over streamable HTTP only")
        return await document_resources(request, params.cursor if params is not None else None)


def build_server() -> MCPServer:
    server: MCPServer = PopagentMcpServer(
        "popagent",
        title="popagent",
        instructions="popagent is a self-hosted AI agent: chat with it (chat), hand it background work "
        "(run_task, get_task), read its sessions and search its workspaces' documentation.",
    )
    for name, (tool, hints) in TOOLS.items():
        # Unstructured: the answer is the /api route's JSON as text, not wrapped in a `result` object.
        # The description is the docstring without its indentation.
        server.add_tool(tool, name=name, description=inspect.getdoc(tool), annotations=hints, structured_output=False)
    server.resource(
        "popagent://sessions/{session_id}",
        name="session",
        description="a chat session's conversation as Markdown",
        mime_type="text/markdown",
    )(session_resource)
    server.resource(
        DOCUMENT_URI,
        name="workspace document",
        description="a document of a registered workspace's documentation (a Markdown file of the workspace as "
        "last indexed, or an added document); resources/list lists them, search_docs finds them",
        mime_type=DOCUMENT_MIME_TYPE,
    )(workspace_document)
    return server


def session_manager() -> StreamableHTTPSessionManager:
    """The streamable HTTP transport of a new MCP server; it must run (`run()`) while it answers.

    Stateless: no MCP session lives in this process between requests, so any gateway replica answers
    any request, and a tool's progress rides the response stream of the request that called it. No
    DNS-rebinding host check (the gateway is reached by any host name): a rebound page cannot send
    the API key, and without a key set /api is as open to it. (The Starlette app this builds is not
    used: it would be the requests' `app` instead of the gateway, whose channels the tools call.)
    """
    server = build_server()
    server.streamable_http_app(
        stateless_http=True, transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False)
    )
    return server.session_manager
