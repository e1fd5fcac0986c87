"""What evolution learned, as agent runs compose it: overlays after the user base, learned skills beside the user's.

Evolution owns the learned overlays and skills; this process keeps one cached copy
(`GetLearnedState`) and drops it on `popagent.evolution.learning.changed`, so the next run
after a change, a revert or an autonomy toggle reads them again. Every resolution of an
agent composes them: the immutable user-managed instructions first, then the overlay;
the user's enabled skills, then the learned skills no user skill of the same name shadows.
Evolution being unreachable costs the runs their learned additions, never the runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from nats.aio.client import Client as NatsClient

from popagent.evolution.v1 import learning_pb2 as pb
from popagent.evolution.v1 import learning_pb2_grpc
from popagent_agent_runner.state.profiles import AgentProfile, RunSkill
from popagent_core import subjects
from popagent_core.errors import PopagentError
from popagent_core.grpc_client import map_rpc_errors

logger = logging.getLogger(__name__)

# A copy older than this is read again even without an event (one missed while NATS was away).
MAX_AGE_S = 60.0
# After a failed read, runs go without learned additions this long before asking again.
RETRY_AFTER_S = 5.0
READ_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class LearnedSkillView:
    id: str
    agent_id: str
    skill: RunSkill


@dataclass(frozen=True)
class Learned:
    overlays: dict[str, str]
    skills: dict[str, tuple[LearnedSkillView, ...]]


EMPTY = Learned({}, {})


def compose(profiles: dict[str, AgentProfile], learned: Learned) -> dict[str, AgentProfile]:
    """The profiles with their learned overlay after the user's instructions and the
    learned skills no user skill of the same name shadows."""
    if not learned.overlays and not learned.skills:
        return profiles
    composed: dict[str, AgentProfile] = {}
    for agent_id, profile in profiles.items():
        overlay = learned.overlays.get(agent_id, "")
        user_names = {skill.name for skill in profile.skills}
        extra = [view.skill for view in learned.skills.get(agent_id, ()) if view.skill.name not in user_names]
        if not overlay and not extra:
            composed[agent_id] = profile
            continue
        composed[agent_id] = dataclasses.replace(
            profile,
            instructions=f"{profile.instructions}\n\n{overlay}" if overlay else profile.instructions,
            skills=tuple(sorted((*profile.skills, *extra), key=lambda s: s.name)),
        )
    return composed


def _learned(state: pb.LearnedState) -> Learned:
    skills: dict[str, list[LearnedSkillView]] = {}
    for s in state.skills:
        skills.setdefault(s.agent_id, []).append(
            LearnedSkillView(s.id, s.agent_id, RunSkill(s.name, s.description, s.instructions))
        )
    return Learned(dict(state.overlays), {agent: tuple(views) for agent, views in skills.items()})


class LearnedCache:
    def __init__(self, evolution: learning_pb2_grpc.EvolutionLearningServiceStub) -> None:
        self.evolution = evolution
        self._copy: Learned | None = None
        self._read_at = 0.0
        self._generation = 0
        self._lock = asyncio.Lock()

    def invalidate(self) -> None:
        self._generation += 1
        self._copy = None

    async def get(self) -> Learned:
        """The current copy, read again when it was dropped or is too old."""
        copy = self._copy
        if copy is not None and time.monotonic() - self._read_at < MAX_AGE_S:
            return copy
        async with self._lock:
            if self._copy is not None and time.monotonic() - self._read_at < MAX_AGE_S:
                return self._copy
            generation = self._generation
            try:
                with map_rpc_errors():
                    state = await self.evolution.GetLearnedState(pb.GetLearnedStateRequest(), timeout=READ_TIMEOUT_S)
                fresh = _learned(state)
                age = 0.0
            except PopagentError as exc:
                logger.warning("learned overlays unavailable; runs go without them", extra={"error": str(exc)[:200]})
                fresh, age = EMPTY, MAX_AGE_S - RETRY_AFTER_S
            # An invalidation while reading means the copy may already be stale: do not keep it.
            if generation == self._generation:
                self._copy, self._read_at = fresh, time.monotonic() - age
            return fresh

    async def fresh(self) -> Learned:
        """A copy read now (for the skills API), bypassing the cache."""
        self.invalidate()
        return await self.get()


@contextlib.asynccontextmanager
async def invalidated_on_change(cache: LearnedCache, nc: NatsClient) -> AsyncIterator[None]:
    """Drop the cached copy whenever evolution says learned state changed."""

    async def changed(_msg: object) -> None:
        cache.invalidate()

    sub = await nc.subscribe(subjects.LEARNING_CHANGED, cb=changed)
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
