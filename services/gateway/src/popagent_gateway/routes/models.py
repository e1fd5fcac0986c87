"""/api/models: the model gateway's catalog merged with the persisted default model."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from popagent_gateway.configured_models import agent_overrides, default_model, unlisted
from popagent_gateway.deps import AgentRunnerStateStub, ModelCatalogDep
from popagent_gateway.dto.models import ModelsOut, UnlistedModelOut

router = APIRouter(tags=["models"])


@router.get("/models", response_model=ModelsOut)
async def list_models(catalog: ModelCatalogDep, runner: AgentRunnerStateStub) -> ModelsOut:
    """Model ids and context windows from the model gateway (cached), the persisted default model,
    and the configured ids (default and agent overrides) the catalog does not list.

    A catalog outage serves the last list (or an empty one) with `warning` set.
    """
    view, settings, agents = await asyncio.gather(
        catalog.view(),
        runner.GetAgentRuntimeSettings(pb.GetAgentRuntimeSettingsRequest()),
        runner.ListAgents(pb.ListAgentsRequest()),
    )
    default = default_model(settings)
    missing = unlisted(view, [default, *agent_overrides(agents.agents)])
    return ModelsOut(
        models=list(view.models),
        context_windows=view.context_windows,
        default_model=settings.default_model,
        default_model_listed=default not in missing,
        unlisted_models=[UnlistedModelOut.of(entry) for entry in missing],
        warning=view.warning,
    )
