"""The chat turn: supervisor and specialists, tools, hook points, memory threads, streamed events.

| module | does |
|---|---|
| `runner.py` | the turn, from the newest user message to a stored answer |
| `ui_message.py` | the newest user UI message checked, its prompt text and the model-side prompt |
| `evidence.py` | the evolution evidence a turn publishes, with credentials redacted |
| `failure_texts.py` | what the user reads when the model provider failed |
| `agents_factory.py` | pydantic-ai agents built per run from the persisted profiles |
| `delegation.py` | the supervisor's delegation tools and the specialist runs |
| `capability.py` | step bounds, step observation, `PreToolUse`/`PostToolUse*` |
| `hooks_points.py` | the turn's hook dispatch, gate and observational |
| `tools/` | the tool registry, one folder per tool group (`time/`: `getTime`, `memory/`: `remember`, `search/`: `webSearch`, `fetch/`: `webFetch`, `workspace/`: Mastra's `mastra_workspace_*` file and shell tools) |
| `events.py` | the batched turn events and the assistant UI message |
| `thread_store.py` | thread history in, messages and outcome evidence out |
| `memories.py` | long-term memories and recall |
| `observational/` | observational memory: token accounting, Observer and Reflector, the context-window guard |
| `chat_servicer.py` | `AgentRunnerService` (Chat, memories) |
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import httpx

from popagent_agent_runner.docs.documents import Documentation
from popagent_agent_runner.llm.embeddings import GatewayRetrieval
from popagent_agent_runner.llm.model import LeanModels
from popagent_agent_runner.llm.transport import LeanTransport
from popagent_agent_runner.state.sessions import SessionStarts
from popagent_agent_runner.turn.agents_factory import AgentFactory
from popagent_agent_runner.turn.chat_servicer import ChatServicer
from popagent_agent_runner.turn.learned import LearnedCache
from popagent_agent_runner.turn.memories import MemoryStore
from popagent_agent_runner.turn.observational import tokens
from popagent_agent_runner.turn.observational.memory import ObservationalMemory
from popagent_agent_runner.turn.observational.recall import HistorySearch
from popagent_agent_runner.turn.observational.windows import ContextWindows
from popagent_agent_runner.turn.runner import TurnRunner
from popagent_agent_runner.turn.thread_store import ThreadStore
from popagent_agent_runner.turn.tools import ToolRegistry
from popagent_agent_runner.turn.tools.browser import BrowserAccessPoint
from popagent_agent_runner.turn.tools.web import WebAccess
from popagent_agent_runner.workspace.hands import Hands
from popagent_core.db import load_queries
from popagent_hooks_client.client import HooksClient

QUERIES = load_queries(Path(__file__).parent / "queries.sql")
MEMORY_QUERIES = load_queries(Path(__file__).parent / "observational" / "queries.sql")
# A slow local model may take minutes to its first token; connecting must be quick.
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 600.0


@contextlib.asynccontextmanager
async def chat_service(
    pool: asyncpg.Pool,
    hooks: HooksClient,
    starts: SessionStarts,
    ninerouter_url: str,
    ninerouter_api_key: str,
    web: WebAccess,
    hands: Hands | None = None,
    browser: BrowserAccessPoint | None = None,
    learned: LearnedCache | None = None,
    docs: Documentation | None = None,
    *,
    embedding_model: str = "",
    memory_retention_days: int = 0,
) -> AsyncIterator[ChatServicer]:
    """The `AgentRunnerService` servicer, with the one model connection pool it owns."""
    # The turn's agents run unstreamed for pydantic-ai (`agent_runs`): the model streams every text
    # delta to the turn's sink and answers pydantic-ai with the finished response.
    transport = LeanTransport(connect_timeout_s=CONNECT_TIMEOUT_S, read_timeout_s=READ_TIMEOUT_S)
    async with (
        httpx.AsyncClient(transport=transport, timeout=None) as http,
        LeanModels(ninerouter_url, ninerouter_api_key or None, http_client=http) as models,
    ):
        models.preload()
        tokens.preload()
        retrieval = GatewayRetrieval(ninerouter_url, ninerouter_api_key or None, http_client=http)
        memories = MemoryStore(
            pool, QUERIES, retention_days=memory_retention_days, retrieval=retrieval, embedding_model=embedding_model
        )
        windows = ContextWindows(ninerouter_url, ninerouter_api_key or None, http, catalog=models.catalog)
        observational = ObservationalMemory(pool, MEMORY_QUERIES, models.get, windows)
        history_search = HistorySearch(pool, MEMORY_QUERIES, retrieval, embedding_model)
        runner = TurnRunner(
            ThreadStore(pool, QUERIES),
            memories,
            hooks,
            AgentFactory(models, ToolRegistry()),
            starts,
            web,
            hands,
            browser,
            learned,
            docs,
            observational=observational,
            history_search=history_search,
        )
        try:
            yield ChatServicer(runner, memories)
        finally:
            await observational.aclose()
