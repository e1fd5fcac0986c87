"""/api/agents: the four persisted system agents; edits apply on the next run."""

from __future__ import annotations

import asyncio
from typing import Annotated

import orjson
from fastapi import APIRouter, Path, Response

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from popagent_core.errors import NotFound
from popagent_gateway.catalog import ensure_known_model
from popagent_gateway.configured_models import agent_overrides, unlisted
from popagent_gateway.deps import AgentRunnerStateStub, ModelCatalogDep
from popagent_gateway.dto.agents import AGENT_ID_PATTERN, AgentListOut, AgentOut, AgentPatch
from popagent_gateway.dto.models import UnlistedModelOut
from popagent_gateway.wire import warned

router = APIRouter(prefix="/agents", tags=["agents"])


AgentId = Annotated[str, Path(pattern=AGENT_ID_PATTERN, max_length=63)]


def agent_out(agent: pb.Agent) -> AgentOut:
    fields = {name: getattr(agent, name) for name in AgentOut.model_fields if name != "tool_approval"}
    fields["model"] = fields["model"] or None
    return AgentOut.model_validate({**fields, "tool_approval": orjson.loads(agent.tool_approval_json or "[]")})


@router.get("", response_model=AgentListOut)
async def list_agents(runner: AgentRunnerStateStub, catalog: ModelCatalogDep) -> AgentListOut:
    """The supervisor and its three specialists, with every persisted field, the registered tool keys,
    and the model overrides the catalog does not list."""
    response, view = await asyncio.gather(runner.ListAgents(pb.ListAgentsRequest()), catalog.view())
    missing = unlisted(view, agent_overrides(response.agents))
    return AgentListOut(
        agents=[agent_out(a) for a in response.agents],
        known_tools=list(response.known_tools),
        unlisted_models=[UnlistedModelOut.of(entry) for entry in missing],
        warning=view.warning,
    )


async def _ensure_registered_tools(runner: AgentRunnerStateStub, tools: list[str]) -> None:
    """Refuse (404 naming them) tools agent-runner does not register: a membership may only name tools a run can
    offer. 404 as for an unknown model: the request is well formed and names something that is not there (which
    registry keys exist is agent-runner's, so the document cannot list them)."""
    known = (await runner.ListAgents(pb.ListAgentsRequest())).known_tools
    unknown = [tool for tool in tools if tool not in known]
    if unknown:
        raise NotFound(f"tools: not registered: {', '.join(unknown)} (registered tools: {', '.join(known)})")


@router.patch("/{agent_id}", response_model=AgentOut)
async def update_agent(
    agent_id: AgentId, body: AgentPatch, runner: AgentRunnerStateStub, catalog: ModelCatalogDep, response: Response
) -> AgentOut:
    """Edit an agent's name, delegation description, instructions, access, eligibility, tools or model override.

    A tool that is not registered is refused with 404 naming it, and so is a model the catalog does not list.
    """
    changes = body.changes()
    request = pb.UpdateAgentRequest(id=agent_id)
    tools = changes.pop("tools", None)
    if tools is not None:
        await _ensure_registered_tools(runner, tools)
        request.tools.values.extend(tools)
    if "model" in changes:
        model = changes.pop("model")
        if model is not None:
            warned(response, await ensure_known_model(catalog, model))
        # An empty model clears the override: the agent inherits the selected/default model.
        request.model = model or ""
    rules = changes.pop("tool_approval", None)
    if rules is not None:
        request.tool_approval_json = orjson.dumps([rule.model_dump(exclude_none=True) for rule in rules]).decode()
    for name, value in changes.items():
        setattr(request, name, value)
    return agent_out(await runner.UpdateAgent(request))
