"""What every agent of one turn reaches through `ctx.deps`: typed, built once per turn.

One `TurnContext` per turn carries the runtime-settings snapshot, the selected model
route, the persisted profiles and the turn's services through the supervisor and every
specialist; each agent run gets its own `TurnDeps` around it (which agent, which thread,
how many steps).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.usage import RunUsage

from popagent_agent_runner.turn.events import TurnOutput
from popagent_agent_runner.turn.hooks_points import TurnHooks
from popagent_agent_runner.turn.memories import MemoryStore
from popagent_agent_runner.workspace.hands import TurnHands

if TYPE_CHECKING:
    from popagent_agent_runner.turn.tools.browser import TurnBrowser
    from popagent_agent_runner.turn.tools.web import WebAccess

SUPERVISOR_ID = "popagent"
# The resource every chat thread belongs to (the spec's single user).
USER_RESOURCE = "popagent-user"


@dataclass(frozen=True)
class RuntimeSnapshot:
    """One read of popagent_agent_runtime_settings, used unchanged for the whole turn."""

    default_model: str
    supervisor_max_steps: int
    specialist_max_steps: int
    max_concurrent_tool_calls: int
    max_processor_retries: int
    final_response_feedback: str
    delegation_context_max_chars: int
    delegation_result_max_chars: int
    delegation_failure_text: str
    delegation_truncation_text: str
    # The workspace shell's timeout of a command that names none.
    command_timeout_ms: int

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> RuntimeSnapshot:
        return cls(**{name: row[name] for name in cls.__dataclass_fields__})


@dataclass(frozen=True)
class AgentProfile:
    """One persisted agent (popagent_agents), as this turn read it."""

    id: str
    display_name: str
    description: str
    instructions: str
    delegation_eligible: bool
    tools: tuple[str, ...]
    # None: the request-selected or default route.
    model: str | None
    # Which workspace tools it gets: none, read-only or read-write (decided here, never by a prompt).
    workspace_access: str = "none"
    # Which browser operations it may run: none, read-only or interactive (enforced by browser-bridge).
    browser_access: str = "none"

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> AgentProfile:
        return cls(
            id=row["id"],
            display_name=row["display_name"],
            description=row["description"],
            instructions=row["instructions"],
            delegation_eligible=row["delegation_eligible"],
            tools=tuple(row["tools"]),
            model=row["model"],
            workspace_access=row["workspace_access"],
            browser_access=row.get("browser_access", "none"),
        )


@dataclass
class SpecialistRun:
    """A finished delegation, kept until the turn persists it on its own isolated thread."""

    thread_id: str
    agent_id: str
    messages: list[ModelMessage]


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
    # Usage of the specialists; the supervisor's own is on its run result.
    specialist_usage: RunUsage = field(default_factory=RunUsage)
    # The turn's repository and the background processes its agents started.
    hands: TurnHands | None = None
    # The browser as this turn read its settings; None: no browser-bridge.
    browser: TurnBrowser | None = None

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

    @property
    def is_supervisor(self) -> bool:
        return self.agent_id == SUPERVISOR_ID
