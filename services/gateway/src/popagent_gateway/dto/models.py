"""GET /api/models, and the configured-model report /api/agents shares."""

from __future__ import annotations

from pydantic import Field

from popagent_gateway.configured_models import ConfiguredModel
from popagent_gateway.dto import WireModel


class UnlistedModelOut(WireModel):
    """A model id a persisted setting names that the model catalog does not list."""

    model: str = Field(description="the configured model id")
    setting: str = Field(description="the field that names it: `defaultModel` or an agent's `model`")
    resource: str = Field(description="where to change it (PATCH), e.g. /api/settings/agent-runtime")
    agent_id: str | None = Field(default=None, description="the agent whose override it is; null for the default")
    message: str = Field(description="what is wrong, in words")

    @classmethod
    def of(cls, entry: ConfiguredModel) -> UnlistedModelOut:
        return cls(
            model=entry.model,
            setting=entry.setting,
            resource=entry.resource,
            agent_id=entry.agent_id,
            message=f"{entry.describe()} is not listed by the model catalog",
        )


class ModelsOut(WireModel):
    models: list[str] = Field(description="model ids of the model gateway, exactly as it names them")
    context_windows: dict[str, int] = Field(description="context window in tokens, for models that report one")
    default_model: str = Field(description="the persisted default (agent-runtime settings)")
    default_model_listed: bool = Field(
        description="false when a current catalog answer does not list the default: a chat without `model` is refused"
    )
    unlisted_models: list[UnlistedModelOut] = Field(
        description="configured ids (the default and every agent override) the catalog does not list; "
        "empty while the catalog is unavailable (see `warning`)"
    )
    warning: str | None = Field(default=None, description="set when the catalog is stale or unavailable")
