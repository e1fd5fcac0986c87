"""/api/models: the model gateway's catalog merged with the persisted default model."""

from __future__ import annotations

import asyncio

import grpc
from fastapi import APIRouter

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from popagent_gateway.configured_models import agent_overrides, default_model, unlisted
from popagent_gateway.deps import AgentRunnerStateStub, ModelCatalogDep
from popagent_gateway.dto.models import ModelsOut, UnlistedModelOut

router = APIRouter(tags=["models"])

CONFIGURED_UNKNOWN = "the configured models are unknown right now (agent-runner or its database is unavailable)"


async def _configured(
    runner: AgentRunnerStateStub,
) -> tuple[pb.AgentRuntimeSettings, pb.ListAgentsResponse] | None:
    """The runtime settings and agents, or None while agent-runner cannot answer for them."""
    try:
        return await asyncio.gather(
            runner.GetAgentRuntimeSettings(pb.GetAgentRuntimeSettingsRequest()),
            runner.ListAgents(pb.ListAgentsRequest()),
        )
    except grpc.aio.AioRpcError as exc:
        if exc.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            raise
        return None


@router.get("/models", response_model=ModelsOut)
async def list_models(catalog: ModelCatalogDep, runner: AgentRunnerStateStub) -> ModelsOut:
    """Model ids and context windows from the model gateway (cached), the persisted default model,
    and the configured ids (default and agent overrides) the catalog does not list.

    A catalog outage serves the last list (or an empty one) with `warning` set. The catalog
    needs no database: while agent-runner's settings are unreachable (its database is down)
    the list is still served, with the configured ids unknown and `warning` saying so.
    """
    view, configured = await asyncio.gather(catalog.view(), _configured(runner), return_exceptions=False)
    if configured is None:
        return ModelsOut(
            models=list(view.models),
            context_windows=view.context_windows,
            default_model="",
            default_model_listed=True,
            unlisted_models=[],
            warning=CONFIGURED_UNKNOWN if view.warning is None else f"{view.warning}; {CONFIGURED_UNKNOWN}",
        )
    settings, agents = configured
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
