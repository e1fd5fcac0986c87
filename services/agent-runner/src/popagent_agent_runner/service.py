"""Wiring of the agent-runner service: kernel (schema, pool, NATS, outbox, gRPC server) then its own parts."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from popagent.agent_runner.v1 import (
    agent_runner_pb2_grpc,
    attachments_pb2_grpc,
    channels_pb2_grpc,
    documents_pb2_grpc,
    mcp_servers_pb2_grpc,
    memory_pb2_grpc,
    skills_pb2_grpc,
)
from popagent.browser_bridge.v1 import browser_bridge_pb2_grpc, navigator_pb2_grpc
from popagent.events.v1 import events_pb2
from popagent.evolution.v1 import learning_pb2_grpc
from popagent.hooks.v1 import hooks_pb2_grpc
from popagent.secrets.v1 import secrets_pb2_grpc
from popagent_agent_runner.approvals.gate import ApprovalGate
from popagent_agent_runner.approvals.store import ApprovalStore
from popagent_agent_runner.attachments.store import AttachmentStore
from popagent_agent_runner.browser.access import BrowserAccessPoint
from popagent_agent_runner.browser.access import invalidated_on_change as browser_settings_invalidated_on_change
from popagent_agent_runner.channels.credentials import ChannelCredentials
from popagent_agent_runner.channels.hub import ChannelHub
from popagent_agent_runner.channels.store import ChannelStore
from popagent_agent_runner.context.hands import Hands
from popagent_agent_runner.docs.documents import Documentation, documentation
from popagent_agent_runner.llm.embeddings import GatewayRetrieval
from popagent_agent_runner.llm.model import LeanModels
from popagent_agent_runner.llm.transport import LeanTransport
from popagent_agent_runner.lsp.languages import ServerCatalog
from popagent_agent_runner.lsp.manager import LanguageServers
from popagent_agent_runner.mcp.oauth import OAuthKeeper
from popagent_agent_runner.mcp.store import McpServerStore
from popagent_agent_runner.mcp.tokens import SecretTokens
from popagent_agent_runner.mcp.toolbox import McpToolbox
from popagent_agent_runner.memory import LONG_TERM_QUERIES, THREAD_QUERIES
from popagent_agent_runner.memory.long_term import MemoryStore
from popagent_agent_runner.memory.observational import QUERIES as OBSERVATIONAL_QUERIES
from popagent_agent_runner.memory.observational import tokens
from popagent_agent_runner.memory.observational.memory import ObservationalMemory
from popagent_agent_runner.memory.observational.recall import HistorySearch
from popagent_agent_runner.memory.observational.store import ObservationStore
from popagent_agent_runner.memory.observational.windows import ContextWindows
from popagent_agent_runner.memory.threads import USER_RESOURCE, ThreadStore
from popagent_agent_runner.servicers.attachments import AttachmentsServicer
from popagent_agent_runner.servicers.channels import ChannelsServicer
from popagent_agent_runner.servicers.chat import ChatServicer
from popagent_agent_runner.servicers.documents import DocumentsServicer
from popagent_agent_runner.servicers.mcp_servers import McpServersServicer
from popagent_agent_runner.servicers.memory import SessionMemoryServicer
from popagent_agent_runner.servicers.skills import AgentRunnerSkillsServicer
from popagent_agent_runner.servicers.state import AgentRunnerStateServicer
from popagent_agent_runner.servicers.tasks import TaskServicer
from popagent_agent_runner.settings import Settings
from popagent_agent_runner.state import settings_rules
from popagent_agent_runner.state.agents import AgentStore
from popagent_agent_runner.state.orphans import OrphanRepair
from popagent_agent_runner.state.self_update import SelfUpdateAttemptStore
from popagent_agent_runner.state.sessions import SessionDeleter, SessionStarts, SessionStore
from popagent_agent_runner.state.settings_store import ChangeFact, SingletonSettings
from popagent_agent_runner.state.skills import SkillStore
from popagent_agent_runner.state.workspaces import AgentWorkspaceStore
from popagent_agent_runner.tools import KNOWN_TOOLS, ToolRegistry
from popagent_agent_runner.turn.agents_factory import AgentFactory
from popagent_agent_runner.turn.chat_turns import ChatTurns
from popagent_agent_runner.turn.learned import LearnedCache, invalidated_on_change
from popagent_agent_runner.turn.log import TurnLog
from popagent_agent_runner.turn.peers import RunnerPresence, TurnControl
from popagent_agent_runner.turn.records import TurnRecords
from popagent_agent_runner.turn.runner import TurnRunner
from popagent_agent_runner.turn.self_update import SelfUpdate
from popagent_agent_runner.turn.tasks import TaskTurns
from popagent_agent_runner.web.access import web_access
from popagent_agent_runner.workspace.disk_budget import MIB, DiskBudget
from popagent_agent_runner.workspace.sandbox import Sandbox
from popagent_core import subjects
from popagent_core.db import load_queries
from popagent_core.errors import PopagentError
from popagent_core.grpc_client import open_channel
from popagent_core.service import service_kernel
from popagent_hooks_client.client import HooksClient

logger = logging.getLogger(__name__)

MIGRATIONS = Path(__file__).parent / "migrations"
QUERIES = load_queries(Path(__file__).parent / "state" / "queries.sql")
# A slow local model may take minutes to its first token; connecting must be quick.
MODEL_CONNECT_TIMEOUT_S = 5.0
MODEL_READ_TIMEOUT_S = 600.0
# On stop, task turns get this long to finish before they are released to the queue; the
# server's grace after that lets their SHUTDOWN answers (and chat streams' ends) go out.
TASK_TURN_GRACE_S = 2.0
SERVER_GRACE_S = 3.0


@dataclass(frozen=True)
class RunningAgentRunner:
    port: int
    deleter: SessionDeleter


@contextlib.asynccontextmanager
async def build(settings: Settings) -> AsyncIterator[RunningAgentRunner]:
    async with (
        service_kernel("agent-runner", settings, MIGRATIONS, pool_max_size=settings.pool_max_size) as kernel,
        contextlib.AsyncExitStack() as stack,
    ):
        hooks_channel = await stack.enter_async_context(open_channel(settings.hooks_address, settings.internal_token))
        browser_channel = await stack.enter_async_context(
            open_channel(settings.browser_bridge_address, settings.internal_token)
        )
        evolution_channel = await stack.enter_async_context(
            open_channel(settings.evolution_address, settings.internal_token)
        )
        evolution = learning_pb2_grpc.EvolutionLearningServiceStub(evolution_channel)
        secrets_channel = await stack.enter_async_context(
            open_channel(settings.secrets_address, settings.internal_token)
        )
        learned = LearnedCache(evolution)
        await stack.enter_async_context(invalidated_on_change(learned, kernel.nats))
        pool = kernel.pool
        hooks = HooksClient(hooks_pb2_grpc.HooksServiceStub(hooks_channel))
        workspaces = AgentWorkspaceStore(pool, settings.workspace_root, QUERIES)
        deleter = SessionDeleter(
            pool=pool,
            workspaces=workspaces,
            hooks=hooks,
            browser=browser_bridge_pb2_grpc.BrowserBridgeServiceStub(browser_channel),
            q=QUERIES,
        )
        sandbox = Sandbox(
            max_processes=settings.sandbox_max_processes,
            memory_bytes=settings.sandbox_memory_mb * MIB,
            disk_budget=DiskBudget(settings.workspace_disk_mb * MIB),
        )
        # Unwound after the gRPC server stops: every sandboxed command still running is killed.
        stack.push_async_callback(sandbox.close)
        reason = await sandbox.probe()
        if reason is not None:
            logger.warning(
                "workspace shell and code inspection disabled", extra={"reason": f"sandbox unavailable: {reason}"}
            )
        # Unwound with the sandbox: every language server is shut down and its process group killed.
        # The servers run in the shell's sandbox (the same pids limit, the same availability).
        servers = LanguageServers(
            ServerCatalog(settings.language_servers_dir),
            sandbox=sandbox,
            max_servers=settings.lsp_max_servers,
            idle_timeout_s=settings.lsp_idle_timeout_s,
            request_timeout_s=settings.lsp_request_timeout_s,
        )
        stack.push_async_callback(servers.close)
        hands = Hands(settings.workspace_root, sandbox, lsp=servers)
        # Users' MCP servers: their connections (stdio servers in the sandbox) close before the sandbox.
        mcp_tokens = SecretTokens(secrets_pb2_grpc.SecretsServiceStub(secrets_channel))
        mcp_oauth = OAuthKeeper(pool, mcp_tokens)
        mcp_store = McpServerStore(pool, mcp_tokens, mcp_oauth)
        mcp = McpToolbox(
            mcp_store,
            mcp_tokens,
            mcp_oauth,
            sandbox,
            call_timeout_s=settings.mcp_call_timeout_s,
            connect_wait_s=settings.mcp_connect_wait_s,
            list_timeout_s=settings.mcp_list_timeout_s,
        )
        stack.push_async_callback(mcp.close)
        sessions = SessionStore(pool, workspaces, QUERIES)
        starts = SessionStarts(hooks)
        records = TurnRecords(pool, runner_id=runner_name(settings.grpc_address), lease_s=settings.turn_lease_s)
        approvals = ApprovalStore(pool)
        agents = AgentStore(pool, QUERIES, KNOWN_TOOLS)
        attachments = AttachmentStore(
            pool, sessions=sessions, workspaces=workspaces, agents=agents, workspace_root=settings.workspace_root
        )
        attachments_pb2_grpc.add_AttachmentsServiceServicer_to_server(AttachmentsServicer(attachments), kernel.server)
        # One store for the turns and the state routes: a version switch drops the cached history it replaces.
        threads = ThreadStore(pool, THREAD_QUERIES)
        servicer = AgentRunnerStateServicer(
            sessions=sessions,
            threads=threads,
            turns=records,
            approvals=approvals,
            deleter=deleter,
            agents=agents,
            workspaces=workspaces,
            runtime_settings=SingletonSettings(
                pool=pool,
                name="agent-runtime",
                rules=settings_rules.AGENT_RUNTIME,
                queries=QUERIES,
                prefix="agent_runtime_settings",
                # The tasks worker applies task-runtime changes while it runs.
                changed=ChangeFact(
                    subjects.AGENT_RUNTIME_SETTINGS_CHANGED,
                    events_pb2.AgentRuntimeSettingsChanged().SerializeToString(),
                ),
            ),
            memory_settings=SingletonSettings(
                pool=pool, name="memory", rules=settings_rules.MEMORY, queries=QUERIES, prefix="memory_settings"
            ),
            starts=starts,
            sandbox=sandbox,
        )
        agent_runner_pb2_grpc.add_AgentRunnerStateServiceServicer_to_server(servicer, kernel.server)
        mcp_servers_pb2_grpc.add_AgentRunnerMcpServiceServicer_to_server(
            McpServersServicer(mcp_store, mcp, mcp_oauth), kernel.server
        )
        skills_pb2_grpc.add_AgentRunnerSkillsServiceServicer_to_server(
            AgentRunnerSkillsServicer(SkillStore(pool, QUERIES), learned, evolution), kernel.server
        )
        web = await stack.enter_async_context(
            web_access(
                searxng_url=settings.searxng_url,
                search_timeout_s=settings.web_search_timeout_s,
                fetch_timeout_s=settings.web_fetch_timeout_s,
                fetch_max_bytes=settings.web_fetch_max_bytes,
                allow_private=settings.web_fetch_allow_private_addresses,
            )
        )
        docs = await stack.enter_async_context(
            documentation(
                pool,
                workspaces,
                settings.workspace_root,
                gateway_url=settings.ninerouter_url,
                gateway_api_key=settings.ninerouter_api_key,
                embedding_model=settings.docs_embedding_model,
                rerank_model=settings.docs_rerank_model,
            )
        )
        documents_pb2_grpc.add_DocumentsServiceServicer_to_server(DocumentsServicer(docs), kernel.server)
        browser = BrowserAccessPoint(
            browser_bridge_pb2_grpc.BrowserBridgeServiceStub(browser_channel),
            navigator_pb2_grpc.BrowserNavigatorServiceStub(browser_channel),
        )
        await stack.enter_async_context(browser_settings_invalidated_on_change(browser, kernel.nats))
        # The one model connection pool: the turn's agents run unstreamed for pydantic-ai (`agent_runs`),
        # the model streams every text delta to the turn's sink and answers with the finished response.
        http = await stack.enter_async_context(
            httpx.AsyncClient(
                transport=LeanTransport(connect_timeout_s=MODEL_CONNECT_TIMEOUT_S, read_timeout_s=MODEL_READ_TIMEOUT_S),
                timeout=None,
            )
        )
        models = await stack.enter_async_context(
            LeanModels(settings.ninerouter_url, settings.ninerouter_api_key or None, http_client=http)
        )
        models.preload()
        tokens.preload()
        retrieval = GatewayRetrieval(settings.ninerouter_url, settings.ninerouter_api_key or None, http_client=http)
        memories = MemoryStore(
            pool,
            LONG_TERM_QUERIES,
            retention_days=settings.memory_retention_days,
            retrieval=retrieval,
            embedding_model=settings.memory_embedding_model,
        )
        windows = ContextWindows(
            settings.ninerouter_url, settings.ninerouter_api_key or None, http, catalog=models.catalog
        )
        observation_store = ObservationStore(pool, OBSERVATIONAL_QUERIES)
        observational = ObservationalMemory(store=observation_store, model_for=models.get, windows=windows)
        stack.push_async_callback(observational.aclose)
        runner = TurnRunner(
            threads=threads,
            memories=memories,
            hooks=hooks,
            factory=AgentFactory(models, ToolRegistry()),
            starts=starts,
            web=web,
            hands=hands,
            approvals=ApprovalGate(approvals, timeout_s=settings.approval_timeout_s),
            browser=browser,
            mcp=mcp,
            learned=learned,
            docs=docs,
            observational=observational,
            history_search=HistorySearch(
                pool, OBSERVATIONAL_QUERIES, retrieval=retrieval, embedding_model=settings.memory_embedding_model
            ),
            attachments=attachments,
        )
        turn_log = TurnLog(kernel.nats)
        await turn_log.ensure_stream(replicas=settings.nats_stream_replicas)
        stack.push_async_callback(turn_log.aclose)
        if released := await records.release_own():
            logger.info("turns this runner ran before it restarted are taken over", extra={"turns": released})
        control = TurnControl(kernel.nats, runner_id=records.runner_id)
        chat_turns = ChatTurns(runner=runner, records=records, log=turn_log, control=control)
        chat = ChatServicer(turns=chat_turns, memories=memories)
        await stack.enter_async_context(control.serving(chat_turns.cancel_here))
        task_turns = TaskTurns(
            runner,
            sessions,
            records,
            turn_log,
            SelfUpdate(workspaces, agents, SelfUpdateAttemptStore(pool), settings.workspace_root),
        )
        leases = asyncio.create_task(
            records.keep_leases(lambda: [*chat_turns.held_turn_ids(), *task_turns.running_turn_ids()]),
            name="turn-leases",
        )
        stack.push_async_callback(_cancelled, leases)
        adopting = asyncio.create_task(chat_turns.keep_adopting(), name="queued-turns")
        stack.push_async_callback(_cancelled, adopting)
        agent_runner_pb2_grpc.add_AgentRunnerServiceServicer_to_server(chat, kernel.server)

        async def create_channel_session(session_id: str, title: str, workspace_id: str) -> None:
            session = await sessions.create(session_id, title, workspace_id)
            await starts.created(session.id, session.workspace_id)

        # Channel conversations are chat sessions; their replies stream from the turns this runner starts.
        channel_hub = ChannelHub(
            ChannelStore(pool, ChannelCredentials(secrets_pb2_grpc.SecretsServiceStub(secrets_channel))),
            chat_turns,
            create_channel_session,
            approvals,
            edit_interval_s=settings.channel_edit_interval_s,
            edit_window_s=settings.channel_edit_window_s,
        )
        stack.push_async_callback(channel_hub.close)
        servicer.on_answered = channel_hub.approval_answered
        relaying = asyncio.create_task(channel_hub.keep_relaying(), name="channel-relays")
        stack.push_async_callback(_cancelled, relaying)
        syncing = asyncio.create_task(channel_hub.keep_syncing(), name="channel-matrix-syncs")
        stack.push_async_callback(_cancelled, syncing)
        channels_pb2_grpc.add_AgentRunnerChannelsServiceServicer_to_server(ChannelsServicer(channel_hub), kernel.server)
        memory_pb2_grpc.add_SessionMemoryServiceServicer_to_server(
            SessionMemoryServicer(observation_store), kernel.server
        )
        # Background task attempts run through the same turn runner as chat.
        task_servicer = TaskServicer(task_turns)
        agent_runner_pb2_grpc.add_AgentRunnerTaskServiceServicer_to_server(task_servicer, kernel.server)
        port = await stack.enter_async_context(kernel.serving(settings.grpc_address, grace_s=SERVER_GRACE_S))
        presence = RunnerPresence(kernel.nats, runner_id=records.runner_id, address=advertised_address(settings, port))
        await stack.enter_async_context(presence.announcing())

        # Unwinds before the server stops: gateways stop sending turns here, then running task
        # turns end with SHUTDOWN (requeued) and chat streams with an error event, in time.
        async def interrupt_turns() -> None:
            chat_turns.taking_turns = False
            await presence.leave()
            await asyncio.gather(
                task_servicer.interrupt_all(TASK_TURN_GRACE_S), chat_turns.interrupt_all(TASK_TURN_GRACE_S)
            )

        stack.push_async_callback(interrupt_turns)
        await _resume_pending_deletions(deleter, settings.pending_deletion_grace_s)
        await _remove_orphans(OrphanRepair(pool))
        await _resume_index_runs(docs)
        yield RunningAgentRunner(port, deleter)


def runner_name(grpc_address: str) -> str:
    """This runner's id in turn records: its host and gRPC port, the same after a restart (so the
    turns it ran end as interrupted then); with an ephemeral port (0), unique to this process."""
    port = grpc_address.rpartition(":")[2]
    if port in ("", "0"):
        return f"{socket.gethostname()}:pid-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    return f"{socket.gethostname()}:{port}"


def advertised_address(settings: Settings, port: int) -> str:
    """Where gateways dial this runner: POPAGENT_AGENT_RUNNER_ADVERTISE_ADDR, else its listen address
    with the port it got, named by this host's name when it listens on every interface."""
    if settings.advertise_address:
        return settings.advertise_address
    if settings.grpc_address.startswith("unix:"):
        return settings.grpc_address
    host = settings.grpc_address.rpartition(":")[0]
    if host in ("", "0.0.0.0", "[::]", "::"):
        host = socket.gethostname()
    return f"{host}:{port}"


async def _cancelled(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _resume_pending_deletions(deleter: SessionDeleter, grace_s: float) -> None:
    try:
        finished = await deleter.resume_pending(grace_s)
    except PopagentError as exc:
        logger.warning("pending session deletions not resumed", extra={"error": str(exc)})
        return
    if finished:
        logger.info("pending session deletions finished", extra={"sessions": finished})


async def _remove_orphans(repair: OrphanRepair) -> None:
    try:
        removed = await repair.sweep(chat_resource=USER_RESOURCE)
    except PopagentError as exc:
        logger.warning("orphaned rows not removed", extra={"error": str(exc)})
        return
    if not removed.empty:
        # A session's rows go together; these lost theirs another way (a partial restore, a defect).
        logger.warning(
            "orphaned rows removed",
            extra={
                "threads": len(removed.threads),
                "turns": len(removed.turns),
                "approvals": len(removed.approvals),
                "grant_sessions": len(removed.grant_sessions),
            },
        )


async def _resume_index_runs(docs: Documentation) -> None:
    try:
        resumed = await docs.indexer.resume()
    except PopagentError as exc:
        logger.warning("documentation index runs not resumed", extra={"error": str(exc)})
        return
    if resumed:
        logger.info("documentation index runs resumed", extra={"workspaces": resumed})
