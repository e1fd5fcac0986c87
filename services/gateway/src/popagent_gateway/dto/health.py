"""GET /api/health: readiness of both PostgreSQL stores and every service."""

from __future__ import annotations

from popagent_gateway.dto import WireModel


class ComponentHealthOut(WireModel):
    ok: bool
    detail: str = ""


class HealthOut(WireModel):
    ok: bool
    components: dict[str, ComponentHealthOut]
