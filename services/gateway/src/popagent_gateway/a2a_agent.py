"""popagent as an A2A agent (docs/interop.md): its card at /.well-known/agent-card.json and the
JSON-RPC endpoint at /a2a, both the official a2a-sdk's, which speaks protocol 1.0 and, on the same
endpoint, 0.3.

A message is one chat turn of the supervisor, started as POST /api/chat starts one (chat_turns.py);
an A2A context is a popagent session (`session_of`). Tasks live in the SDK's in-memory store, so
tasks/get, tasks/cancel and resubscribing reach a task only through the gateway process that ran it;
the turns and sessions themselves are popagent's, and any gateway reads them. The API key guards /a2a
(`ApiKeyMiddleware`, bounded.py); the card is public, as A2A clients read it before they authenticate.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import grpc
from a2a.helpers.proto_helpers import new_task, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes import DefaultServerCallContextBuilder, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    APIKeySecurityScheme,
    HTTPAuthSecurityScheme,
    Message,
    SecurityRequirement,
    SecurityScheme,
    StringList,
    TaskState,
)
from a2a.utils.constants import (
    PROTOCOL_VERSION_0_3,
    PROTOCOL_VERSION_1_0,
    TransportProtocol,
)
from a2a.utils.errors import TaskNotCancelableError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from popagent_gateway.bounded import A2A_PATH
from popagent_gateway.chat_turns import FollowedTurn, follow_turn, refusal_text, start_chat_turn
from popagent_gateway.deps import API_KEY_HEADER, get_agent_runner_state
from popagent_gateway.dto.sessions import ID_PATTERN
from popagent_gateway.errors import client_message
from popagent_gateway.routes import chat
from popagent_gateway.settings import Settings

# The one artifact of a task: the answer, streamed in pieces, then whole.
ANSWER_ARTIFACT = "answer"
# Names a context whose id is no session id (`session_of`); fixed, so every gateway maps alike.
CONTEXT_NAMESPACE = uuid.UUID("5f0c2a57-3f3e-4c43-9d0b-5a2a0c9e1a2b")
SKILLS = [
    AgentSkill(
        id="chat",
        name="Ask popagent",
        description="Ask popagent's supervisor agent anything: it answers, uses its tools (workspace files, "
        "shell, web search, documentation search, memory) and delegates to its specialists.",
        tags=["chat", "assistant"],
        examples=["What changed in the release notes this week?"],
    ),
    AgentSkill(
        id="research",
        name="Research",
        description="The researcher specialist: finds and reads sources on the web and in the workspace's "
        "documentation, and reports with references.",
        tags=["research", "web", "documentation"],
    ),
    AgentSkill(
        id="implementation",
        name="Implementation",
        description="The implementer specialist: writes and changes code in the workspace and runs it.",
        tags=["code", "implementation"],
    ),
    AgentSkill(
        id="review",
        name="Review",
        description="The reviewer specialist: reviews changes and code for defects and risks.",
        tags=["review", "code"],
    ),
]


def agent_card(a2a_url: str, *, keyed: bool) -> AgentCard:
    """The card naming the endpoint at `a2a_url`; with `keyed`, the API key as its security."""
    card = AgentCard(
        name="popagent",
        description="popagent, a self-hosted AI agent: a supervisor with tools and specialists for research, "
        "implementation and review. Each message is one chat turn; a context is a popagent session.",
        version="0.1.0",
        # 1.0 first: the SDK's clients take it, and the same endpoint answers 0.3's methods.
        supported_interfaces=[
            AgentInterface(url=a2a_url, protocol_binding=TransportProtocol.JSONRPC, protocol_version=version)
            for version in (PROTOCOL_VERSION_1_0, PROTOCOL_VERSION_0_3)
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=SKILLS,
    )
    if keyed:
        card.security_schemes["apiKey"].CopyFrom(
            SecurityScheme(
                api_key_security_scheme=APIKeySecurityScheme(
                    location="header", name=API_KEY_HEADER, description="popagent's API key (POPAGENT_API_KEY)"
                )
            )
        )
        card.security_schemes["bearer"].CopyFrom(
            SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(
                    scheme="bearer", description="popagent's API key (POPAGENT_API_KEY) as a bearer token"
                )
            )
        )
        # Either one: two requirements are alternatives.
        card.security_requirements.extend(
            SecurityRequirement(schemes={name: StringList()}) for name in ("apiKey", "bearer")
        )
    return card


def session_of(context_id: str) -> str:
    """The popagent session of an A2A context: the contextId itself where it is a valid session id (the
    SDK's generated ones, UUIDs, are), else a name-based UUID of it. Nothing is remembered, so every
    gateway process maps a context to the same session, and a client may continue a session by its id."""
    return context_id if re.fullmatch(ID_PATTERN, context_id) else str(uuid.uuid5(CONTEXT_NAMESPACE, context_id))


def http_request(context: ServerCallContext) -> Request:
    """The HTTP request that carried the A2A call (`RequestInContext`): its app holds the gateway's channels."""
    request = context.state["request"]
    assert isinstance(request, Request)
    return request


class RequestInContext(DefaultServerCallContextBuilder):
    """The SDK's call context, with the HTTP request the executor reaches the services through."""

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        context.state["request"] = request
        return context


@dataclass
class RunningTurn:
    session_id: str
    followed: FollowedTurn


class PopagentExecutor(AgentExecutor):
    """Runs a task as one chat turn and reports it as the task's status and its answer artifact."""

    def __init__(self) -> None:
        # The turns of this process's tasks that run or wait for an approval, by task id: what
        # tasks/cancel cancels.
        self.turns: dict[str, RunningTurn] = {}

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id is not None and context.context_id is not None  # the SDK sets both
        task_id = context.task_id
        updater = TaskUpdater(event_queue, task_id, context.context_id)
        request = http_request(context.call_context)
        session_id = session_of(context.context_id)
        if context.current_task is None:
            # The SDK keeps events for a task it was told of first.
            history = [context.message] if context.message is not None else []
            await event_queue.enqueue_event(
                new_task(task_id, context.context_id, TaskState.TASK_STATE_SUBMITTED, history=history)
            )
        await updater.start_work()
        try:
            started, warning = await start_chat_turn(
                request,
                context.get_user_input(),
                session_id=session_id,
                create_session=True,
                model=_text(context.metadata.get("model")),
                workspace_id=_text(context.metadata.get("workspaceId")),
                message_id_prefix="a2a",
            )
        except Exception as exc:
            text = refusal_text(exc)
            if text is None:
                raise
            await updater.failed(agent_says(updater, text))
            return

        async def stream(followed: FollowedTurn, added: str) -> None:
            # A piece replaces what was streamed when it is all the turn's text (a turn another runner
            # took over begins again).
            appends = sum(map(len, followed.texts.values())) > len(added)
            await updater.add_artifact([new_text_part(added)], artifact_id=ANSWER_ARTIFACT, append=appends)

        turn = self.turns[task_id] = RunningTurn(session_id, FollowedTurn())
        pending = chat.pending_check(await get_agent_runner_state(request), session_id)
        waiting = False
        try:
            waiting = await follow_turn(started, pending, stream, turn.followed)
        except grpc.aio.AioRpcError as exc:
            reason = client_message(exc.code(), exc.details() or "")
            await updater.failed(agent_says(updater, f"{reason} The turn may go on: read session {session_id}."))
            return
        finally:
            if not waiting:
                # Gone already when tasks/cancel took it.
                self.turns.pop(task_id, None)
        await self._report(updater, turn, waiting, warning)

    @staticmethod
    async def _report(updater: TaskUpdater, turn: RunningTurn, waiting: bool, warning: str | None) -> None:
        """The task's state once its turn ended or stopped for an approval."""
        followed = turn.followed
        if followed.cancelled:
            await updater.cancel(agent_says(updater, f"the turn was cancelled (session {turn.session_id})"))
        elif followed.failure is not None:
            await updater.failed(
                agent_says(updater, f"the turn failed: {followed.failure} (session {turn.session_id})")
            )
        elif waiting:
            asks = "; ".join(
                f"{approval['toolName'] or 'a tool'} waits for approval {approval['approvalId']}"
                for approval in followed.waiting_approvals
            )
            await updater.requires_input(
                agent_says(
                    updater,
                    f"{asks}: answer it in the popagent UI or with POST /api/approvals/{{approvalId}}; the turn "
                    f"goes on once it is answered (session {turn.session_id}).",
                )
            )
        else:
            # The whole answer replaces the streamed pieces: it is what the task keeps.
            await updater.add_artifact(
                [new_text_part(followed.answer)], artifact_id=ANSWER_ARTIFACT, append=False, last_chunk=True
            )
            await updater.update_status(
                TaskState.TASK_STATE_COMPLETED, metadata={"warning": warning} if warning else None
            )

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Cancel the task's turn as POST /api/sessions/{id}/turns/{turnId}/cancel does, then the task."""
        assert context.task_id is not None  # the SDK names the task it cancels
        turn = self.turns.pop(context.task_id, None)
        if turn is not None and turn.followed.turn_id:
            try:
                await chat.cancel_turn(turn.session_id, turn.followed.turn_id, http_request(context.call_context))
            except Exception as exc:
                text = refusal_text(exc)
                if text is None:
                    raise
                raise TaskNotCancelableError(text) from None
        await TaskUpdater(event_queue, context.task_id, context.context_id or "").cancel()


def agent_says(updater: TaskUpdater, text: str) -> Message:
    return updater.new_agent_message([new_text_part(text)])


def _text(value: object) -> str | None:
    """A metadata field as a string (None, the default, where it is absent or no string)."""
    return value if isinstance(value, str) else None


@dataclass
class A2aEndpoints:
    """The SDK's request handler, which must be closed (`aclose()`) when the app stops, and the two
    endpoints the gateway routes to (interop.py)."""

    handler: DefaultRequestHandler
    answer: Callable[[Request], Awaitable[Response]]
    card: Callable[[Request], Awaitable[Response]]


def a2a_endpoints(settings: Settings) -> A2aEndpoints:
    keyed = bool(settings.api_key)
    configured = f"{settings.public_url}{A2A_PATH}" if settings.public_url else ""
    # The handler reads its card for capabilities only; the card served names the endpoint as below.
    handler = DefaultRequestHandler(
        agent_executor=PopagentExecutor(),
        task_store=InMemoryTaskStore(),
        agent_card=agent_card(configured or f"http://{settings.host}:{settings.port}{A2A_PATH}", keyed=keyed),
    )

    async def card(request: Request) -> Response:
        # The endpoint as the client reached the card, unless the public URL is configured (a proxy
        # in between that changes the host or the scheme).
        a2a_url = configured or str(request.url_for("a2a"))
        return JSONResponse(agent_card_to_dict(agent_card(a2a_url, keyed=keyed)))

    [jsonrpc] = create_jsonrpc_routes(handler, A2A_PATH, context_builder=RequestInContext(), enable_v0_3_compat=True)
    return A2aEndpoints(handler, jsonrpc.endpoint, card)
