"""/api/settings/*: the four settings singletons, each read from and written to its owning service.

agent-runtime and memory live in agent-runner, autonomy in evolution, browser in
browser-bridge. Every change applies on the next turn (browser: the next browser use).
Range and cross-field violations the owner finds answer 422 naming the field.
"""

from __future__ import annotations

from typing import Any, TypeVar

from fastapi import APIRouter, Response

from popagent.agent_runner.v1 import agent_runner_pb2 as runner_pb
from popagent.browser_bridge.v1 import browser_bridge_pb2 as browser_pb
from popagent.evolution.v1 import evolution_pb2 as evolution_pb
from popagent_gateway.catalog import ensure_known_model
from popagent_gateway.deps import AgentRunnerStateStub, BrowserBridgeStub, EvolutionStub, ModelCatalogDep
from popagent_gateway.dto import WireModel
from popagent_gateway.dto.settings import (
    AgentRuntimeSettingsOut,
    AgentRuntimeSettingsPatch,
    AutonomySettingsOut,
    AutonomySettingsPatch,
    BrowserSettingsOut,
    BrowserSettingsPatch,
    MemorySettingsOut,
    MemorySettingsPatch,
)
from popagent_gateway.wire import field_violations, from_message, warned

router = APIRouter(prefix="/settings", tags=["settings"])


Out = TypeVar("Out", bound=WireModel)


def _updated(model: type[Out], answer: Any) -> Out:
    """An owner's update answer: its range/cross-field violations as a 422, else the new row."""
    if answer.violations:
        raise field_violations(answer.violations)
    return from_message(model, answer.settings)


@router.get("/agent-runtime", response_model=AgentRuntimeSettingsOut)
async def get_agent_runtime_settings(runner: AgentRunnerStateStub) -> AgentRuntimeSettingsOut:
    """Default model, step ceilings, tool-call and retry limits, delegation bounds and background-task timing."""
    settings = await runner.GetAgentRuntimeSettings(runner_pb.GetAgentRuntimeSettingsRequest())
    return from_message(AgentRuntimeSettingsOut, settings)


@router.patch("/agent-runtime", response_model=AgentRuntimeSettingsOut)
async def update_agent_runtime_settings(
    body: AgentRuntimeSettingsPatch, runner: AgentRunnerStateStub, catalog: ModelCatalogDep, response: Response
) -> AgentRuntimeSettingsOut:
    """Change some agent-runtime settings; turn settings apply on the next turn, task settings to the running
    worker at once (new attempts take the new timings). The default model must be in the catalog."""
    if body.default_model is not None:
        warned(response, await ensure_known_model(catalog, body.default_model))
    answer = await runner.UpdateAgentRuntimeSettings(runner_pb.UpdateAgentRuntimeSettingsRequest(**body.changes()))
    return _updated(AgentRuntimeSettingsOut, answer)


@router.get("/memory", response_model=MemorySettingsOut)
async def get_memory_settings(runner: AgentRunnerStateStub) -> MemorySettingsOut:
    """Observational-memory controls: thresholds, retention, buffering, activation, budgets, retrieval, guidance."""
    settings = await runner.GetMemorySettings(runner_pb.GetMemorySettingsRequest())
    return from_message(MemorySettingsOut, settings)


@router.patch("/memory", response_model=MemorySettingsOut)
async def update_memory_settings(body: MemorySettingsPatch, runner: AgentRunnerStateStub) -> MemorySettingsOut:
    """Change some memory settings; applies on the next turn. Shared budgets require async buffering off."""
    answer = await runner.UpdateMemorySettings(runner_pb.UpdateMemorySettingsRequest(**body.changes()))
    return _updated(MemorySettingsOut, answer)


@router.get("/autonomy", response_model=AutonomySettingsOut)
async def get_autonomy_settings(evolution: EvolutionStub) -> AutonomySettingsOut:
    """Evolution, skill-creation and contained self-update controls."""
    settings = await evolution.GetAutonomySettings(evolution_pb.GetAutonomySettingsRequest())
    return from_message(AutonomySettingsOut, settings)


@router.patch("/autonomy", response_model=AutonomySettingsOut)
async def update_autonomy_settings(body: AutonomySettingsPatch, evolution: EvolutionStub) -> AutonomySettingsOut:
    """Change some autonomy controls; a disabled policy wins before any learned mutation."""
    answer = await evolution.UpdateAutonomySettings(evolution_pb.UpdateAutonomySettingsRequest(**body.changes()))
    return _updated(AutonomySettingsOut, answer)


@router.get("/browser", response_model=BrowserSettingsOut)
async def get_browser_settings(browser: BrowserBridgeStub) -> BrowserSettingsOut:
    """The global browser capability."""
    settings = await browser.GetBrowserSettings(browser_pb.GetBrowserSettingsRequest())
    return from_message(BrowserSettingsOut, settings)


@router.patch("/browser", response_model=BrowserSettingsOut)
async def update_browser_settings(body: BrowserSettingsPatch, browser: BrowserBridgeStub) -> BrowserSettingsOut:
    """Turn the global browser capability on or off; applies immediately, without a restart."""
    settings = await browser.UpdateBrowserSettings(browser_pb.UpdateBrowserSettingsRequest(**body.changes()))
    return from_message(BrowserSettingsOut, settings)
