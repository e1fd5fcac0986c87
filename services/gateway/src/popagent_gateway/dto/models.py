"""GET /api/models."""

from __future__ import annotations

from pydantic import Field

from popagent_gateway.dto import WireModel


class ModelsOut(WireModel):
    models: list[str] = Field(description="model ids of the model gateway, exactly as it names them")
    context_windows: dict[str, int] = Field(description="context window in tokens, for models that report one")
    default_model: str = Field(description="the persisted default (agent-runtime settings)")
    warning: str | None = Field(default=None, description="set when the catalog is stale or unavailable")
