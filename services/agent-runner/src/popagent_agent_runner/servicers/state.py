"""AgentRunnerStateService: sessions, agents, workspaces and settings; proto <-> stores only."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, get_args

import grpc
import orjson
from google.protobuf.message import Message

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from popagent.agent_runner.v1 import agent_runner_pb2_grpc
from popagent_agent_runner.approvals.store import Approval, ApprovalState, ApprovalStore, Scope
from popagent_agent_runner.memory.threads import ThreadStore
from popagent_agent_runner.servicers.messages import message_of
from popagent_agent_runner.servicers.session_reads import readable_messages
from popagent_agent_runner.state.agents import AgentChanges, AgentRecord, AgentStore
from popagent_agent_runner.state.sessions import SessionDeleter, SessionRecord, SessionStarts, SessionStore
from popagent_agent_runner.state.settings_rules import Violation
from popagent_agent_runner.state.settings_store import SettingsRecord, SingletonSettings
from popagent_agent_runner.state.workspaces import AgentWorkspaceStore, WorkspaceRecord
from popagent_agent_runner.tools import KNOWN_TOOLS
from popagent_agent_runner.turn.records import TurnRecords
from popagent_agent_runner.workspace.sandbox import Sandbox
from popagent_core.errors import InvalidArgument
from popagent_core.redaction import redact_ui_message

MAX_MESSAGES_BYTES = 8 * 1024 * 1024 - 64 * 1024
# A message search: its query text and how many matches one answer carries.
MAX_SEARCH_CHARS = 500
MAX_SEARCH_RESULTS = 100


def _time(value: dt.datetime | None) -> str:
    return value.isoformat() if value is not None else ""


def _optional(request: Message, field: str) -> Any:
    return getattr(request, field) if request.HasField(field) else None


def session_message(session: SessionRecord, *, with_messages: bool = False) -> pb.Session:
    messages = readable_messages(session.messages_json or "").encode() if with_messages else b""
    return message_of(pb.Session, session, messages_json=messages)


def agent_message(agent: AgentRecord) -> pb.Agent:
    return message_of(pb.Agent, agent, tool_approval_json=orjson.dumps(agent.tool_approval.to_json()).decode())


def approval_message(approval: Approval) -> pb.Approval:
    return message_of(pb.Approval, approval, arguments_json=orjson.dumps(approval.arguments).decode())


def _policy_document(request: pb.UpdateAgentRequest) -> object | None:
    if not request.HasField("tool_approval_json"):
        return None
    try:
        return orjson.loads(request.tool_approval_json)
    except orjson.JSONDecodeError:
        raise InvalidArgument("toolApproval is not JSON") from None


_DECISIONS: dict[int, tuple[bool, Scope | None]] = {
    pb.APPROVE_ONCE: (True, "once"),
    pb.APPROVE_FOR_SESSION: (True, "session"),
    pb.DENY: (False, None),
}
MAX_ANSWER_REASON_BYTES = 2 * 1024


def workspace_message(record: WorkspaceRecord) -> pb.Workspace:
    return message_of(pb.Workspace, record)


def _violations(found: list[Violation]) -> list[pb.FieldViolation]:
    return [pb.FieldViolation(field=v.field, message=v.message) for v in found]


@dataclass(kw_only=True, eq=False)
class AgentRunnerStateServicer(agent_runner_pb2_grpc.AgentRunnerStateServiceServicer):
    sessions: SessionStore
    # The sessions' threads: the versions of edited messages.
    threads: ThreadStore
    # The sessions' queued turns, shown with a session.
    turns: TurnRecords
    deleter: SessionDeleter
    agents: AgentStore
    workspaces: AgentWorkspaceStore
    runtime_settings: SingletonSettings
    memory_settings: SingletonSettings
    starts: SessionStarts
    approvals: ApprovalStore
    sandbox: Sandbox | None = None
    # Told of each approval answered here (the UI's and the API's answers): a channel card shows it.
    on_answered: Callable[[Approval], None] | None = None

    # Sessions ----------------------------------------------------------------------

    async def ListSessions(
        self, request: pb.ListSessionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListSessionsResponse:
        found = await self.sessions.list(archived=request.archived, workspace_id=request.workspace_id)
        return pb.ListSessionsResponse(sessions=[session_message(session) for session in found])

    async def SearchMessages(
        self, request: pb.SearchMessagesRequest, context: grpc.aio.ServicerContext
    ) -> pb.SearchMessagesResponse:
        query = request.query.strip()
        if not query or len(query) > MAX_SEARCH_CHARS:
            raise InvalidArgument(f"q must be 1 to {MAX_SEARCH_CHARS} characters")
        if not 1 <= request.limit <= MAX_SEARCH_RESULTS:
            raise InvalidArgument(f"limit must be 1 to {MAX_SEARCH_RESULTS}")
        found = await self.sessions.search_messages(query, request.limit)
        return pb.SearchMessagesResponse(
            matches=[message_of(pb.MessageMatch, match, archived=match.archived_at is not None) for match in found]
        )

    async def CreateSession(self, request: pb.CreateSessionRequest, context: grpc.aio.ServicerContext) -> pb.Session:
        session = await self.sessions.create(request.id, request.title, request.workspace_id)
        await self.starts.created(session.id, session.workspace_id)
        return session_message(session)

    async def GetSession(self, request: pb.GetSessionRequest, context: grpc.aio.ServicerContext) -> pb.Session:
        return await self._full_session(await self.sessions.get(request.id))

    async def _full_session(self, session: SessionRecord) -> pb.Session:
        """The session with its messages and its queued turns."""
        message = session_message(session, with_messages=True)
        message.queued_turns.extend(
            message_of(
                pb.QueuedTurn, turn, turn_id=turn.id, message_json=orjson.dumps(turn.request["message"]).decode()
            )
            for turn in await self.turns.queued(session.id)
        )
        message.message_versions.extend(
            message_of(pb.MessageVersions, versions) for versions in await self.threads.message_versions(session.id)
        )
        return message

    async def ShowMessageVersion(
        self, request: pb.ShowMessageVersionRequest, context: grpc.aio.ServicerContext
    ) -> pb.Session:
        if request.version < 1:
            raise InvalidArgument("version must be 1 or more")
        await self.threads.show_version(request.session_id, request.message_id, request.version)
        return await self._full_session(await self.sessions.get(request.session_id))

    async def SaveSession(
        self, request: pb.SaveSessionRequest, context: grpc.aio.ServicerContext
    ) -> pb.SaveSessionResponse:
        if len(request.messages_json) > MAX_MESSAGES_BYTES:
            raise InvalidArgument("messages are too large")
        try:
            parsed = orjson.loads(request.messages_json or b"[]")
        except orjson.JSONDecodeError:
            raise InvalidArgument("messages_json must be UTF-8 JSON") from None
        if not isinstance(parsed, list):
            raise InvalidArgument("messages_json must be a JSON array of UI messages")
        # Session persistence is one of the places retired secret-tool payloads never pass.
        messages = orjson.dumps([redact_ui_message(m) if isinstance(m, dict) else m for m in parsed]).decode()
        result = await self.sessions.save(
            request.id, request.revision, _optional(request, "title"), messages, request.message_count
        )
        if result.saved is not None:
            return pb.SaveSessionResponse(conflict=False, session=session_message(result.saved))
        assert result.current is not None
        return pb.SaveSessionResponse(conflict=True, session=await self._full_session(result.current))

    async def UpdateSession(self, request: pb.UpdateSessionRequest, context: grpc.aio.ServicerContext) -> pb.Session:
        row = await self.sessions.update(
            request.id,
            title=_optional(request, "title"),
            archived=_optional(request, "archived"),
            double_texting=_optional(request, "double_texting"),
        )
        return session_message(row)

    async def DeleteSession(
        self, request: pb.DeleteSessionRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteSessionResponse:
        await self.deleter.delete(request.id)
        return pb.DeleteSessionResponse()

    async def DeleteWorkspaceSessions(
        self, request: pb.DeleteWorkspaceSessionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteWorkspaceSessionsResponse:
        deleted = await self.deleter.delete_workspace_sessions(request.workspace_id)
        return pb.DeleteWorkspaceSessionsResponse(deleted=deleted)

    # Agents ------------------------------------------------------------------------

    async def ListAgents(
        self, request: pb.ListAgentsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListAgentsResponse:
        found = await self.agents.list()
        return pb.ListAgentsResponse(agents=[agent_message(agent) for agent in found], known_tools=list(KNOWN_TOOLS))

    async def UpdateAgent(self, request: pb.UpdateAgentRequest, context: grpc.aio.ServicerContext) -> pb.Agent:
        changes = AgentChanges(
            display_name=_optional(request, "display_name"),
            description=_optional(request, "description"),
            instructions=_optional(request, "instructions"),
            source_url=_optional(request, "source_url"),
            workspace_access=_optional(request, "workspace_access"),
            browser_access=_optional(request, "browser_access"),
            delegation_eligible=_optional(request, "delegation_eligible"),
            tools=list(request.tools.values) if request.HasField("tools") else None,
            model=_optional(request, "model"),
            tool_approval=_policy_document(request),
        )
        return agent_message(await self.agents.update(request.id, changes))

    # Approvals ---------------------------------------------------------------------

    async def ListApprovals(
        self, request: pb.ListApprovalsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListApprovalsResponse:
        if request.state and request.state not in get_args(ApprovalState):
            raise InvalidArgument(f"state must be one of {', '.join(get_args(ApprovalState))}")
        found = await self.approvals.list(state=request.state, session_id=request.session_id)
        return pb.ListApprovalsResponse(approvals=[approval_message(approval) for approval in found])

    async def AnswerApproval(self, request: pb.AnswerApprovalRequest, context: grpc.aio.ServicerContext) -> pb.Approval:
        if request.decision not in _DECISIONS:
            raise InvalidArgument("decision must be approve, approve for the session, or deny")
        if len(request.reason.encode()) > MAX_ANSWER_REASON_BYTES:
            raise InvalidArgument(f"reason must be at most {MAX_ANSWER_REASON_BYTES} bytes")
        approved, scope = _DECISIONS[request.decision]
        answered = await self.approvals.answer(
            request.approval_id,
            approved=approved,
            scope=scope,
            answered_by=request.answered_by or "api",
            reason=request.reason,
        )
        if self.on_answered is not None:
            self.on_answered(answered)
        return approval_message(answered)

    async def ListApprovalGrants(
        self, request: pb.ListApprovalGrantsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListApprovalGrantsResponse:
        grants = await self.approvals.grants(request.session_id)
        return pb.ListApprovalGrantsResponse(grants=[message_of(pb.ApprovalGrant, grant) for grant in grants])

    async def RevokeApprovalGrant(
        self, request: pb.RevokeApprovalGrantRequest, context: grpc.aio.ServicerContext
    ) -> pb.RevokeApprovalGrantResponse:
        await self.approvals.revoke(request.session_id, request.tool_name)
        return pb.RevokeApprovalGrantResponse()

    # Workspaces --------------------------------------------------------------------

    async def ListWorkspaces(
        self, request: pb.ListWorkspacesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListWorkspacesResponse:
        return pb.ListWorkspacesResponse(workspaces=[workspace_message(w) for w in await self.workspaces.list()])

    async def CreateWorkspace(
        self, request: pb.CreateWorkspaceRequest, context: grpc.aio.ServicerContext
    ) -> pb.Workspace:
        record = await self.workspaces.register(request.id, request.name, request.path, request.description)
        return workspace_message(record)

    async def UpdateWorkspace(
        self, request: pb.UpdateWorkspaceRequest, context: grpc.aio.ServicerContext
    ) -> pb.Workspace:
        record = await self.workspaces.update(
            request.id,
            name=_optional(request, "name"),
            path=_optional(request, "path"),
            description=_optional(request, "description"),
        )
        return workspace_message(record)

    async def DeleteWorkspace(
        self, request: pb.DeleteWorkspaceRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteWorkspaceResponse:
        await self.workspaces.delete(request.id)
        return pb.DeleteWorkspaceResponse()

    # Settings ----------------------------------------------------------------------

    def _runtime(self, record: SettingsRecord) -> pb.AgentRuntimeSettings:
        return pb.AgentRuntimeSettings(**record.values, updated_at=_time(record.updated_at))

    def _memory(self, record: SettingsRecord) -> pb.MemorySettings:
        return pb.MemorySettings(**record.values, updated_at=_time(record.updated_at))

    async def GetAgentRuntimeSettings(
        self, request: pb.GetAgentRuntimeSettingsRequest, context: grpc.aio.ServicerContext
    ) -> pb.AgentRuntimeSettings:
        return self._runtime(await self.runtime_settings.get())

    async def UpdateAgentRuntimeSettings(
        self, request: pb.UpdateAgentRuntimeSettingsRequest, context: grpc.aio.ServicerContext
    ) -> pb.UpdateAgentRuntimeSettingsResponse:
        changes = {c: getattr(request, c) for c in self.runtime_settings.columns if request.HasField(c)}
        row, violations = await self.runtime_settings.update(changes)
        return pb.UpdateAgentRuntimeSettingsResponse(settings=self._runtime(row), violations=_violations(violations))

    async def GetMemorySettings(
        self, request: pb.GetMemorySettingsRequest, context: grpc.aio.ServicerContext
    ) -> pb.MemorySettings:
        return self._memory(await self.memory_settings.get())

    async def UpdateMemorySettings(
        self, request: pb.UpdateMemorySettingsRequest, context: grpc.aio.ServicerContext
    ) -> pb.UpdateMemorySettingsResponse:
        changes = {c: getattr(request, c) for c in self.memory_settings.columns if request.HasField(c)}
        row, violations = await self.memory_settings.update(changes)
        return pb.UpdateMemorySettingsResponse(settings=self._memory(row), violations=_violations(violations))

    async def GetSandboxStatus(
        self, request: pb.GetSandboxStatusRequest, context: grpc.aio.ServicerContext
    ) -> pb.SandboxStatus:
        if self.sandbox is None:
            return pb.SandboxStatus(available=False, reason="sandbox unavailable: not configured")
        reason = self.sandbox.unavailable_reason
        if reason is not None:
            # A failure may have been passing (a probe is cheap): look again before reporting it.
            reason = await self.sandbox.probe()
        return pb.SandboxStatus(
            available=reason is None,
            reason=f"sandbox unavailable: {reason}" if reason else "",
            limits=await self.sandbox.limits(),
        )
