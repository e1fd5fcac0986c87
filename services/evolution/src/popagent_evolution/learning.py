"""One learning attempt for one agent's claimed signals: reflect on the configured model (with the agent's
recent success rate), then apply."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from popagent_evolution.learned import LearnedStore
from popagent_evolution.reflection import Reflection, Reflector
from popagent_evolution.repo import AutonomySettingsRepo
from popagent_evolution.signals import SignalRecord

logger = logging.getLogger(__name__)

# The model reflection runs on: agent-runner's persisted default model, read per attempt.
DefaultModel = Callable[[], Awaitable[str]]


class Learner:
    def __init__(
        self, settings: AutonomySettingsRepo, reflector: Reflector, store: LearnedStore, default_model: DefaultModel
    ) -> None:
        self.settings = settings
        self.reflector = reflector
        self.store = store
        self.default_model = default_model

    async def __call__(self, agent_id: str, signals: list[SignalRecord]) -> None:
        if not (await self.settings.get()).evolution_enabled:
            # No model call while learning is off; apply rechecks under the row lock and ignores them.
            reflection = Reflection(selections=[])
        else:
            rate = await self.store.signals.outcome_rate(agent_id)
            reflection = await self.reflector.reflect(await self.default_model(), agent_id, signals, rate)
        outcome = await self.store.apply(agent_id, signals, reflection)
        logger.info(
            "learning attempt applied",
            extra={
                "agent_id": agent_id,
                "applied": len(outcome.applied),
                "dismissed": len(outcome.dismissed),
                "ignored": len(outcome.ignored),
                "revisions": [r.id for r in outcome.revisions],
            },
        )
