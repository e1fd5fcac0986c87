"""/api/models: the model gateway's catalog merged with the persisted default model."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from popagent_gateway.deps import AgentRunnerStateStub, ModelCatalogDep
from popagent_gateway.dto.models import ModelsOut

router = APIRouter(tags=["models"])


@router.get("/models", response_model=ModelsOut)
async def list_models(catalog: ModelCatalogDep, runner: AgentRunnerStateStub) -> ModelsOut:
    """Model ids and context windows from the model gateway (cached), and the persisted default model.

    A catalog outage serves the last list (or an empty one) with `warning` set.
    """
    view, settings = await asyncio.gather(
        catalog.view(), runner.GetAgentRuntimeSettings(pb.GetAgentRuntimeSettingsRequest())
    )
    return ModelsOut(
        models=list(view.models),
        context_windows=view.context_windows,
        default_model=settings.default_model,
        warning=view.warning,
    )
