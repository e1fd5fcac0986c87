"""/api/agents/:id/skills: an agent's database-backed Agent Skills, applied from its next run."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response

from popagent.agent_runner.v1 import skills_pb2 as pb
from popagent_gateway.deps import AgentRunnerSkillsStub
from popagent_gateway.dto.agents import AGENT_ID_PATTERN
from popagent_gateway.dto.skills import SkillCreate, SkillListOut, SkillOut, SkillPatch
from popagent_gateway.wire import from_message

router = APIRouter(prefix="/agents", tags=["skills"])

AgentId = Annotated[str, Path(pattern=AGENT_ID_PATTERN, max_length=63)]
SkillId = Annotated[str, Path(min_length=1, max_length=64)]


def _fields(body: SkillCreate | SkillPatch) -> pb.SkillFields:
    fields = pb.SkillFields()
    for name in body.model_fields_set:
        value = getattr(body, name)
        if name in ("references", "metadata"):
            getattr(fields, name).entries.update(value)
            getattr(fields, name).SetInParent()
        else:
            setattr(fields, name, value)
    return fields


@router.get("/{agent_id}/skills", response_model=SkillListOut)
async def list_skills(agent_id: AgentId, skills: AgentRunnerSkillsStub) -> SkillListOut:
    """Every skill of the agent, enabled or not, by name."""
    response = await skills.ListSkills(pb.ListSkillsRequest(agent_id=agent_id))
    return SkillListOut(skills=[from_message(SkillOut, s) for s in response.skills])


@router.post("/{agent_id}/skills", response_model=SkillOut, status_code=201)
async def create_skill(agent_id: AgentId, body: SkillCreate, skills: AgentRunnerSkillsStub) -> SkillOut:
    """Add a skill from its fields or import one from a SKILL.md; a name the agent already has is 409."""
    request = pb.CreateSkillRequest(agent_id=agent_id)
    if body.skill_md is not None:
        request.skill_md = body.skill_md
    else:
        request.fields.CopyFrom(_fields(body))
    return from_message(SkillOut, await skills.CreateSkill(request))


@router.patch("/{agent_id}/skills/{skill_id}", response_model=SkillOut)
async def update_skill(
    agent_id: AgentId, skill_id: SkillId, body: SkillPatch, skills: AgentRunnerSkillsStub
) -> SkillOut:
    """Edit a skill's fields (enable or disable it), or replace it all from a SKILL.md."""
    request = pb.UpdateSkillRequest(agent_id=agent_id, skill_id=skill_id)
    if body.skill_md is not None:
        request.skill_md = body.skill_md
    else:
        request.fields.CopyFrom(_fields(body))
    return from_message(SkillOut, await skills.UpdateSkill(request))


@router.delete("/{agent_id}/skills/{skill_id}", status_code=204, response_class=Response)
async def delete_skill(agent_id: AgentId, skill_id: SkillId, skills: AgentRunnerSkillsStub) -> Response:
    """Delete a skill for good."""
    await skills.DeleteSkill(pb.DeleteSkillRequest(agent_id=agent_id, skill_id=skill_id))
    return Response(status_code=204)
