"""EvolutionLearningService: signals, revisions, reverts and learned state; proto <-> stores only."""

from __future__ import annotations

import datetime as dt
from typing import Any

import grpc
import orjson

from popagent.evolution.v1 import learning_pb2 as pb
from popagent.evolution.v1 import learning_pb2_grpc
from popagent_core.errors import InvalidArgument
from popagent_evolution.learned import LearnedSkill, LearnedStore, RevisionRecord
from popagent_evolution.signals import STATUSES, SignalRecord, SignalRepo

DEFAULT_LIMIT = 50


def _time(value: dt.datetime) -> str:
    return value.isoformat()


def _json(value: dict[str, Any] | None) -> str:
    return "" if value is None else orjson.dumps(value).decode()


def signal_message(s: SignalRecord) -> pb.EvolutionSignal:
    return pb.EvolutionSignal(
        id=s.id,
        trace_id=s.trace_id,
        turn_id=s.turn_id,
        session_id=s.session_id,
        agent_id=s.agent_id,
        failure_class=s.failure_class,
        goal=s.goal,
        evidence=s.evidence,
        status=s.status,
        attempts=s.attempts,
        max_attempts=s.max_attempts,
        due_at=_time(s.due_at),
        last_error=s.last_error,
        created_at=_time(s.created_at),
        updated_at=_time(s.updated_at),
    )


def revision_message(r: RevisionRecord, reverted_by: str = "") -> pb.Revision:
    return pb.Revision(
        id=r.id,
        target_kind=r.target_kind,
        target_key=r.target_key,
        agent_id=r.agent_id,
        before_json=_json(r.before),
        after_json=_json(r.after),
        strategy=r.strategy,
        signal_ids=r.signal_ids,
        trace_ids=r.trace_ids,
        reverts_revision_id=r.reverts_revision_id or "",
        created_at=_time(r.created_at),
        reverted_by_id=reverted_by,
    )


def skill_message(s: LearnedSkill) -> pb.LearnedSkill:
    return pb.LearnedSkill(
        id=s.id, agent_id=s.agent_id, name=s.name, description=s.description, instructions=s.instructions
    )


def _limit(value: int) -> int:
    return value if value > 0 else DEFAULT_LIMIT


class EvolutionLearningServicer(learning_pb2_grpc.EvolutionLearningServiceServicer):
    def __init__(self, signals: SignalRepo, learned: LearnedStore) -> None:
        self.signals = signals
        self.learned = learned

    async def ListEvolutionSignals(
        self, request: pb.ListEvolutionSignalsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListEvolutionSignalsResponse:
        if request.status and request.status not in STATUSES:
            raise InvalidArgument(f"status must be one of {', '.join(STATUSES)}")
        found = await self.signals.list(
            status=request.status or None, agent_id=request.agent_id or None, limit=_limit(request.limit)
        )
        return pb.ListEvolutionSignalsResponse(signals=[signal_message(s) for s in found])

    async def IgnoreSignal(self, request: pb.SignalRequest, context: grpc.aio.ServicerContext) -> pb.EvolutionSignal:
        return signal_message(await self.signals.ignore(request.id))

    async def RetrySignal(self, request: pb.SignalRequest, context: grpc.aio.ServicerContext) -> pb.EvolutionSignal:
        return signal_message(await self.signals.retry(request.id))

    async def ListRevisions(
        self, request: pb.ListRevisionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListRevisionsResponse:
        found = await self.learned.revisions(agent_id=request.agent_id or None, limit=_limit(request.limit))
        reverted = {r.reverts_revision_id: r.id for r in found if r.reverts_revision_id}
        return pb.ListRevisionsResponse(revisions=[revision_message(r, reverted.get(r.id, "")) for r in found])

    async def RevertRevision(self, request: pb.RevertRevisionRequest, context: grpc.aio.ServicerContext) -> pb.Revision:
        return revision_message(await self.learned.revert(request.id))

    async def GetLearnedState(
        self, request: pb.GetLearnedStateRequest, context: grpc.aio.ServicerContext
    ) -> pb.LearnedState:
        state = await self.learned.state()
        return pb.LearnedState(
            overlays=state.overlays,
            skills=[skill_message(s) for skills in state.skills.values() for s in skills],
        )

    async def GetLearnedSkill(
        self, request: pb.LearnedSkillRequest, context: grpc.aio.ServicerContext
    ) -> pb.LearnedSkill:
        return skill_message(await self.learned.get_skill(request.agent_id, request.skill_id))

    async def AdoptLearnedSkill(
        self, request: pb.LearnedSkillRequest, context: grpc.aio.ServicerContext
    ) -> pb.LearnedSkill:
        return skill_message(await self.learned.adopt(request.agent_id, request.skill_id))
