"""AgentRunnerSkillsService: the agents' user-managed skills; proto <-> SkillStore only."""

from __future__ import annotations

import grpc

from popagent.agent_runner.v1 import skills_pb2 as pb
from popagent.agent_runner.v1 import skills_pb2_grpc
from popagent_agent_runner.state.skills import SkillFields, SkillRecord, SkillStore, parse_skill_md, render_skill_md


def skill_message(skill: SkillRecord) -> pb.Skill:
    return pb.Skill(
        id=skill.id,
        agent_id=skill.agent_id,
        name=skill.name,
        description=skill.description,
        instructions=skill.instructions,
        references=skill.references,
        source_url=skill.source_url,
        attribution=skill.attribution,
        license=skill.license,
        compatibility=skill.compatibility,
        metadata=skill.metadata,
        enabled=skill.enabled,
        evolution_managed=False,
        created_at=skill.created_at.isoformat(),
        updated_at=skill.updated_at.isoformat(),
        skill_md=render_skill_md(skill),
    )


def _fields(message: pb.SkillFields) -> SkillFields:
    def optional(field: str) -> object:
        return getattr(message, field) if message.HasField(field) else None

    return SkillFields(
        name=optional("name"),  # type: ignore[arg-type]
        description=optional("description"),  # type: ignore[arg-type]
        instructions=optional("instructions"),  # type: ignore[arg-type]
        references=dict(message.references.entries) if message.HasField("references") else None,
        source_url=optional("source_url"),  # type: ignore[arg-type]
        attribution=optional("attribution"),  # type: ignore[arg-type]
        license=optional("license"),  # type: ignore[arg-type]
        compatibility=optional("compatibility"),  # type: ignore[arg-type]
        metadata=dict(message.metadata.entries) if message.HasField("metadata") else None,
        enabled=optional("enabled"),  # type: ignore[arg-type]
    )


def _source(request: pb.CreateSkillRequest | pb.UpdateSkillRequest) -> SkillFields:
    if request.WhichOneof("source") == "skill_md":
        return parse_skill_md(request.skill_md)
    return _fields(request.fields)


class AgentRunnerSkillsServicer(skills_pb2_grpc.AgentRunnerSkillsServiceServicer):
    def __init__(self, skills: SkillStore) -> None:
        self.skills = skills

    async def ListSkills(
        self, request: pb.ListSkillsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListSkillsResponse:
        return pb.ListSkillsResponse(skills=[skill_message(s) for s in await self.skills.list(request.agent_id)])

    async def CreateSkill(self, request: pb.CreateSkillRequest, context: grpc.aio.ServicerContext) -> pb.Skill:
        return skill_message(await self.skills.create(request.agent_id, _source(request)))

    async def UpdateSkill(self, request: pb.UpdateSkillRequest, context: grpc.aio.ServicerContext) -> pb.Skill:
        return skill_message(await self.skills.update(request.agent_id, request.skill_id, _source(request)))

    async def DeleteSkill(
        self, request: pb.DeleteSkillRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteSkillResponse:
        await self.skills.delete(request.agent_id, request.skill_id)
        return pb.DeleteSkillResponse()
