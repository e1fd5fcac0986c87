"""AgentRunnerSkillsService: the agents' skills; proto <-> SkillStore and evolution's learned skills.

The list shows the user's skills and the learned skills no user skill shadows
(`evolutionManaged`). An edit of a learned skill adopts it, in the order the design asks:
first the user-owned copy is created here (it shadows the learned one by name at once),
then evolution is told the learned skill was adopted, so it never changes or reverts it again.
A delete of a learned skill is an adoption too: it leaves the runs and evolution lets it be.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt

import grpc

from popagent.agent_runner.v1 import skills_pb2 as pb
from popagent.agent_runner.v1 import skills_pb2_grpc
from popagent.evolution.v1 import learning_pb2 as lpb
from popagent.evolution.v1 import learning_pb2_grpc
from popagent_agent_runner.servicers.messages import message_of
from popagent_agent_runner.state.skills import SkillFields, SkillRecord, SkillStore, parse_skill_md, render_skill_md
from popagent_agent_runner.turn.learned import LearnedCache, LearnedSkillView
from popagent_core.errors import NotFound
from popagent_core.grpc_client import map_rpc_errors


def skill_message(skill: SkillRecord, *, evolution_managed: bool = False) -> pb.Skill:
    return message_of(pb.Skill, skill, evolution_managed=evolution_managed, skill_md=render_skill_md(skill))


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


def _learned_record(view: LearnedSkillView) -> SkillRecord:
    epoch = dt.datetime.fromtimestamp(0, dt.UTC)
    return SkillRecord(
        id=view.id,
        agent_id=view.agent_id,
        name=view.skill.name,
        description=view.skill.description,
        instructions=view.skill.instructions,
        references=dict(view.skill.references),
        source_url="",
        attribution="Learned by popagent's evolution loop from this agent's failed turns.",
        license="",
        compatibility="",
        metadata={},
        enabled=True,
        created_at=epoch,
        updated_at=epoch,
    )


def _over(base: SkillFields, changes: SkillFields) -> SkillFields:
    """`base` with every field `changes` sets."""
    given = {
        f.name: getattr(changes, f.name) for f in dataclasses.fields(changes) if getattr(changes, f.name) is not None
    }
    return dataclasses.replace(base, **given)


class AgentRunnerSkillsServicer(skills_pb2_grpc.AgentRunnerSkillsServiceServicer):
    def __init__(
        self,
        skills: SkillStore,
        learned: LearnedCache | None = None,
        evolution: learning_pb2_grpc.EvolutionLearningServiceStub | None = None,
    ) -> None:
        self.skills = skills
        self.learned = learned
        self.evolution = evolution

    async def ListSkills(
        self, request: pb.ListSkillsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListSkillsResponse:
        user = await self.skills.list(request.agent_id)
        found = [skill_message(s) for s in user]
        if self.learned is not None:
            names = {s.name for s in user}
            views = (await self.learned.fresh()).skills.get(request.agent_id, ())
            found += [
                skill_message(_learned_record(v), evolution_managed=True) for v in views if v.skill.name not in names
            ]
        return pb.ListSkillsResponse(skills=sorted(found, key=lambda s: s.name))

    async def _learned_skill(self, agent_id: str, skill_id: str, missing: NotFound) -> lpb.LearnedSkill:
        if self.evolution is None:
            raise missing
        try:
            with map_rpc_errors():
                return await self.evolution.GetLearnedSkill(
                    lpb.LearnedSkillRequest(agent_id=agent_id, skill_id=skill_id), timeout=10.0
                )
        except NotFound:
            raise missing from None

    async def _adopt(self, agent_id: str, skill_id: str) -> None:
        assert self.evolution is not None
        with map_rpc_errors():
            await self.evolution.AdoptLearnedSkill(
                lpb.LearnedSkillRequest(agent_id=agent_id, skill_id=skill_id), timeout=10.0
            )
        if self.learned is not None:
            self.learned.invalidate()

    async def CreateSkill(self, request: pb.CreateSkillRequest, context: grpc.aio.ServicerContext) -> pb.Skill:
        # A SKILL.md of up to 2 MiB is parsed by PyYAML's pure-Python loader: off the event loop.
        return skill_message(await self.skills.create(request.agent_id, await asyncio.to_thread(_source, request)))

    async def UpdateSkill(self, request: pb.UpdateSkillRequest, context: grpc.aio.ServicerContext) -> pb.Skill:
        changes = await asyncio.to_thread(_source, request)
        try:
            return skill_message(await self.skills.update(request.agent_id, request.skill_id, changes))
        except NotFound as missing:
            learned = await self._learned_skill(request.agent_id, request.skill_id, missing)
        base = SkillFields(name=learned.name, description=learned.description, instructions=learned.instructions)
        created = await self.skills.create(request.agent_id, _over(base, changes))
        await self._adopt(request.agent_id, request.skill_id)
        return skill_message(created)

    async def DeleteSkill(
        self, request: pb.DeleteSkillRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteSkillResponse:
        try:
            await self.skills.delete(request.agent_id, request.skill_id)
        except NotFound as missing:
            await self._learned_skill(request.agent_id, request.skill_id, missing)
            await self._adopt(request.agent_id, request.skill_id)
        return pb.DeleteSkillResponse()
