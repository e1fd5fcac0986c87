"""pydantic-ai agents built per run from the persisted profiles and the turn's settings snapshot.

Nothing about an agent lives in code: instructions, tool membership, model override and
delegation eligibility come from popagent_agents as this turn read them, so an edit
applies on the next run. Every agent reaches its model through the one lean
OpenAI-compatible client (`NINEROUTER_URL`), on the profile's override or the turn's
route.
"""

from __future__ import annotations

import asyncio

from pydantic_ai import Agent, RunContext, Tool

from popagent_agent_runner.browser.access import BROWSER_TOOLS
from popagent_agent_runner.context.deps import SUPERVISOR_ID, StepObserver, TurnContext, TurnDeps
from popagent_agent_runner.llm.model import LeanModels
from popagent_agent_runner.state.profiles import AgentProfile
from popagent_agent_runner.tools import ToolRegistry
from popagent_agent_runner.tools.skills.catalog import skill_catalog
from popagent_agent_runner.turn.capability import TurnCapability
from popagent_agent_runner.turn.delegation import Delegation, DelegationActivity


def _members(turn: TurnContext, profile: AgentProfile) -> list[str]:
    """The membership this run gets: the browser tools only with browser access and the browser enabled."""
    browser = turn.browser
    if profile.browser_access != "none" and browser is not None and browser.enabled:
        return list(profile.tools)
    return [name for name in profile.tools if name not in BROWSER_TOOLS]


def _mcp_tools(turn: TurnContext, profile: AgentProfile) -> list[Tool[TurnDeps]]:
    """The tools of the users' MCP servers granted to this agent, as this turn listed them."""
    return turn.mcp.tools_for(profile.id) if turn.mcp is not None else []


async def final_step_feedback(ctx: RunContext[TurnDeps]) -> str:
    """On the step reserved for the answer (tools withdrawn), the persisted feedback says so."""
    if ctx.run_step >= ctx.deps.max_steps:
        return ctx.deps.turn.snapshot.final_response_feedback
    return ""


# Built agents kept for reuse (an agent holds no run state); bounded so edited profiles age out.
MAX_CACHED_AGENTS = 64


class AgentFactory:
    def __init__(self, models: LeanModels, registry: ToolRegistry) -> None:
        self.models = models
        self.registry = registry
        self.delegation = Delegation(self.specialist, self.specialist_deps)
        self._capability = TurnCapability()
        # An agent is rebuilt only when something the model sees changes: its profile (as this
        # turn read it), its model or its tools. Building one costs more than a millisecond.
        self._agents: dict[tuple[object, ...], Agent[TurnDeps, str]] = {}

    def _agent(self, turn: TurnContext, profile: AgentProfile, tools: list[Tool[TurnDeps]]) -> Agent[TurnDeps, str]:
        model = turn.model_for(profile)
        key = (profile.id, profile.instructions, profile.skills, model, tuple(id(tool) for tool in tools))
        agent = self._agents.get(key)
        if agent is None:
            if len(self._agents) >= MAX_CACHED_AGENTS:
                self._agents.clear()
            agent = self._agents[key] = Agent(
                self.models.get(model),
                name=profile.id,
                deps_type=TurnDeps,
                instructions=[profile.instructions, skill_catalog(profile.skills), final_step_feedback],
                tools=tools,
                capabilities=[self._capability],
            )
        return agent

    def supervisor(self, turn: TurnContext) -> Agent[TurnDeps, str]:
        profile = turn.profiles[SUPERVISOR_ID]
        tools = (
            self.registry.tools_for(_members(turn, profile))
            + self.registry.workspace_tools(profile.workspace_access)
            + self.registry.skill_tools(profile.skills)
            + _mcp_tools(turn, profile)
            + self.delegation.tools(turn)
        )
        return self._agent(turn, profile, tools)

    def supervisor_deps(self, turn: TurnContext, steps: StepObserver) -> TurnDeps:
        return TurnDeps(
            turn=turn,
            agent_id=SUPERVISOR_ID,
            thread_id=turn.session_id,
            max_steps=turn.snapshot.supervisor_max_steps,
            tool_slots=asyncio.Semaphore(turn.snapshot.max_concurrent_tool_calls),
            steps=steps,
            workspace_access=turn.profiles[SUPERVISOR_ID].workspace_access,
            browser_access=turn.profiles[SUPERVISOR_ID].browser_access,
        )

    def specialist(self, turn: TurnContext, profile: AgentProfile) -> Agent[TurnDeps, str]:
        # Only the registry's tools: specialists get no delegation tools.
        tools = (
            self.registry.tools_for(_members(turn, profile))
            + self.registry.workspace_tools(profile.workspace_access)
            + self.registry.skill_tools(profile.skills)
            + _mcp_tools(turn, profile)
        )
        return self._agent(turn, profile, tools)

    def specialist_deps(
        self, turn: TurnContext, profile: AgentProfile, thread_id: str, activity: DelegationActivity
    ) -> TurnDeps:
        return TurnDeps(
            turn=turn,
            agent_id=profile.id,
            thread_id=thread_id,
            max_steps=turn.snapshot.specialist_max_steps,
            tool_slots=asyncio.Semaphore(turn.snapshot.max_concurrent_tool_calls),
            steps=activity,
            workspace_access=profile.workspace_access,
            browser_access=profile.browser_access,
        )
