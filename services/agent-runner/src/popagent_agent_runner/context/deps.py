"""What every agent of one turn reaches through `ctx.deps`: typed, built once per turn.

One `TurnContext` per turn carries the runtime-settings snapshot, the selected model
route, the persisted profiles and the turn's services through the supervisor and every
specialist; each agent run gets its own `TurnDeps` around it (which agent, which thread,
how many steps).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from pydantic_ai.messages import ModelResponse
from pydantic_ai.usage import RunUsage

from popagent.events.v1 import events_pb2
from popagent_agent_runner.context.containment import Containment
from popagent_agent_runner.context.events import TurnOutput
from popagent_agent_runner.context.hands import TurnHands
from popagent_agent_runner.context.hooks import TurnHooks
from popagent_agent_runner.memory.long_term import MemoryStore
from popagent_agent_runner.memory.threads import SpecialistRun
from popagent_agent_runner.state.agents import SUPERVISOR_ID
from popagent_agent_runner.state.profiles import AgentProfile, RuntimeSnapshot

if TYPE_CHECKING:
    from popagent_agent_runner.approvals.gate import TurnApprovals
    from popagent_agent_runner.browser.access import TurnBrowser
    from popagent_agent_runner.docs.documents import Documentation
    from popagent_agent_runner.mcp.toolbox import TurnMcp
    from popagent_agent_runner.memory.observational.recall import HistorySearch
    from popagent_agent_runner.web.access import WebAccess


@dataclass
class TurnContext:
    session_id: str
    turn_id: str
    trace_id: str
    workspace_id: str
    # The model id every agent without its own override uses (request-selected or default);
    # specialists read it from here, so they never fall back to a server default.
    route: str
    snapshot: RuntimeSnapshot
    profiles: dict[str, AgentProfile]
    hooks: TurnHooks
    memories: MemoryStore
    output: TurnOutput
    # The process's SearXNG client and page fetcher (webSearch, webFetch).
    web: WebAccess
    specialist_runs: list[SpecialistRun] = field(default_factory=list[SpecialistRun])
    # The outcome of each delegation that ran (succeeded or failed), published with the turn's own:
    # a specialist's failure is the specialist's evidence, not the supervisor's.
    specialist_outcomes: list[events_pb2.TurnCompleted] = field(default_factory=list[events_pb2.TurnCompleted])
    # Usage of the specialists; the supervisor's own is on its run result.
    specialist_usage: RunUsage = field(default_factory=RunUsage)
    # The turn's repository and the background processes its agents started.
    hands: TurnHands | None = None
    # The browser as this turn read its settings; None: no browser-bridge.
    browser: TurnBrowser | None = None
    # The process's documentation search (searchDocs, always within `workspace_id`).
    docs: Documentation | None = None
    # `recall`'s search over the original messages; None: no recall in this process.
    history_search: HistorySearch | None = None
    # The id of the user message the turn answers (recall leaves it, and what follows, out).
    message_id: str = ""
    # The approval gate bound to this turn; None: no policy is applied and no hook can ask.
    approvals: TurnApprovals | None = None
    # Held while a call that waited for a person's approval runs, whichever agent run made it: the
    # spec's suspension-capable calls stay sequential in the whole turn, so the supervisor's approved
    # call and an approved call of a specialist it delegated to in the same step never overlap.
    approved_calls: asyncio.Lock = field(default_factory=asyncio.Lock)
    # The users' MCP servers' tools each agent gets this turn (mcp/toolbox.py); None: none.
    mcp: TurnMcp | None = None
    # A contained self-update attempt's fixed policy (context/containment.py); None: an ordinary turn.
    containment: Containment | None = None

    def model_for(self, profile: AgentProfile) -> str:
        return profile.model or self.route


class StepObserver(Protocol):
    def step_started(self, step: int) -> None: ...

    def step_finished(self, step: int, response: ModelResponse) -> None: ...


@dataclass
class TurnDeps:
    turn: TurnContext
    agent_id: str
    thread_id: str
    # The step on which tools are withdrawn so the agent must answer (its step ceiling).
    max_steps: int
    tool_slots: asyncio.Semaphore
    # The supervisor's steps are the UI message's steps; a specialist's are its activity telemetry.
    steps: StepObserver
    # The agent's persisted workspace access, and its read ledger: content hash of each file
    # (canonical repository path) as this run last read or wrote it (read before write).
    workspace_access: str = "none"
    file_reads: dict[str, str] = field(default_factory=dict[str, str])
    browser_access: str = "none"
    # Held while an approved call of this run runs inside an approved call of the run that delegated
    # to it (which holds the turn's lock, `TurnContext.approved_calls`, for as long as the specialist
    # runs): pydantic-ai validates a step's calls (where a call asks and waits) one by one but runs
    # them in parallel, so without it two such calls of one specialist would run at once.
    approved_calls: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def is_supervisor(self) -> bool:
        return self.agent_id == SUPERVISOR_ID
