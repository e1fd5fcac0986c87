"""EvolutionService: proto <-> repository only."""

from __future__ import annotations

import grpc
from croniter import croniter

from popagent.evolution.v1 import evolution_pb2, evolution_pb2_grpc
from popagent_evolution.repo import AutonomyChanges, AutonomySettings, AutonomySettingsRepo

MAX_CRON_CHARS = 100


def cron_violation(expression: str) -> str | None:
    """Why `expression` is not a five-field cron expression, or None."""
    if len(expression) > MAX_CRON_CHARS or len(expression.split()) != 5 or not croniter.is_valid(expression):
        return "must be a five-field cron expression (minute hour day-of-month month day-of-week)"
    return None


def _message(settings: AutonomySettings) -> evolution_pb2.AutonomySettings:
    return evolution_pb2.AutonomySettings(
        evolution_enabled=settings.evolution_enabled,
        skill_creation_enabled=settings.skill_creation_enabled,
        self_update_enabled=settings.self_update_enabled,
        self_update_cron=settings.self_update_cron,
        updated_at=settings.updated_at.isoformat(),
    )


def _optional(request: evolution_pb2.UpdateAutonomySettingsRequest, field: str) -> bool | None:
    return getattr(request, field) if request.HasField(field) else None


class EvolutionServicer(evolution_pb2_grpc.EvolutionServiceServicer):
    def __init__(self, settings: AutonomySettingsRepo) -> None:
        self.settings = settings

    async def GetAutonomySettings(
        self, request: evolution_pb2.GetAutonomySettingsRequest, context: grpc.aio.ServicerContext
    ) -> evolution_pb2.AutonomySettings:
        return _message(await self.settings.get())

    async def UpdateAutonomySettings(
        self, request: evolution_pb2.UpdateAutonomySettingsRequest, context: grpc.aio.ServicerContext
    ) -> evolution_pb2.UpdateAutonomySettingsResponse:
        cron = request.self_update_cron.strip() if request.HasField("self_update_cron") else None
        if cron is not None and (problem := cron_violation(cron)):
            return evolution_pb2.UpdateAutonomySettingsResponse(
                settings=_message(await self.settings.get()),
                violations=[evolution_pb2.FieldViolation(field="selfUpdateCron", message=problem)],
            )
        changes = AutonomyChanges(
            evolution_enabled=_optional(request, "evolution_enabled"),
            skill_creation_enabled=_optional(request, "skill_creation_enabled"),
            self_update_enabled=_optional(request, "self_update_enabled"),
            self_update_cron=cron,
        )
        return evolution_pb2.UpdateAutonomySettingsResponse(settings=_message(await self.settings.update(changes)))
