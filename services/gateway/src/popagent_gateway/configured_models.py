"""The model ids the persisted configuration names, checked against the model catalog.

Two settings choose models without a request naming one: the agent-runtime default
(`defaultModel` of /api/settings/agent-runtime, used by every agent without an
override when a chat sends no `model`) and each agent's override (`model` of
/api/agents/:id). A fresh model gateway may not list the default (the seeded one is a
9Router id; agents inherit it unless a user set an override), and a provider 404 in the middle of a turn is a poor way to find out. So
/api/models and /api/agents name the configured ids the catalog does not list, and a
chat is refused (400, naming the setting) before its turn starts when an agent it may
run (the supervisor, or a specialist it may delegate to) would use one: agent-runner
checks that against the catalog ids the chat route sends (turn/model_check.py). As with an
explicit `model`, a catalog outage fails open: the turn runs and a warning says what
was not checked.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from popagent.agent_runner.v1 import agent_runner_pb2_grpc
from popagent_gateway.catalog import CatalogView, ModelCatalog, ensure_known_model

logger = logging.getLogger(__name__)

RUNTIME_SETTINGS_RESOURCE = "/api/settings/agent-runtime"
DEFAULT_MODEL_SETTING = "defaultModel"
AGENT_MODEL_SETTING = "model"
SUPERVISOR_ID = "popagent"


@dataclass(frozen=True)
class ConfiguredModel:
    """One model id a persisted setting names: where it is set and which agent it is for."""

    model: str
    # The field, and the resource whose PATCH changes it.
    setting: str
    resource: str
    agent_id: str | None = None

    def describe(self) -> str:
        if self.agent_id is None:
            return f"the default model {self.model!r} ({self.setting} of {self.resource})"
        return f"agent {self.agent_id!r}'s model override {self.model!r} ({self.setting} of {self.resource})"


def default_model(settings: pb.AgentRuntimeSettings) -> ConfiguredModel:
    return ConfiguredModel(settings.default_model, DEFAULT_MODEL_SETTING, RUNTIME_SETTINGS_RESOURCE)


def agent_override(agent: pb.Agent) -> ConfiguredModel | None:
    if not agent.model:
        return None
    return ConfiguredModel(agent.model, AGENT_MODEL_SETTING, f"/api/agents/{agent.id}", agent.id)


def agent_overrides(agents: Iterable[pb.Agent]) -> list[ConfiguredModel]:
    return [override for agent in agents if (override := agent_override(agent)) is not None]


def unlisted(view: CatalogView, configured: Iterable[ConfiguredModel]) -> list[ConfiguredModel]:
    """The configured ids a current catalog answer does not list.

    Only a fresh answer can say an id is missing: during an outage the view's own
    `warning` says the list could not be checked, and nothing is named.
    """
    if not view.fresh:
        return []
    listed = set(view.models)
    return [entry for entry in configured if entry.model not in listed]


def turn_models(
    agents: Sequence[pb.Agent], requested: str | None, settings: pb.AgentRuntimeSettings | None
) -> list[ConfiguredModel]:
    """The configured models a chat turn may run on: for the supervisor and every specialist it
    may delegate to, its override, or else the persisted default when the request names no model."""
    configured: dict[ConfiguredModel, None] = {}
    for agent in agents:
        if agent.id != SUPERVISOR_ID and not agent.delegation_eligible:
            continue
        override = agent_override(agent)
        if override is not None:
            configured[override] = None
        elif not requested and settings is not None:
            configured[default_model(settings)] = None
    return list(configured)


@dataclass(frozen=True)
class TurnModelCheck:
    """What the chat route sends with a turn: the catalog's ids for agent-runner to check the
    turn's agents against (None: not checked there), and the warning of what went unchecked."""

    listed_models: Sequence[str] | None
    warning: str | None


async def check_turn_models(
    catalog: ModelCatalog, runner: agent_runner_pb2_grpc.AgentRunnerStateServiceStub, requested: str | None
) -> TurnModelCheck:
    """Refuse a chat turn whose own `model` the catalog does not list (NotFound, 404), and
    say how agent-runner checks the models its agents would use.

    With a current catalog, agent-runner refuses the turn before it starts, on the agents and
    the default its prelude reads anyway: no call here. During a catalog outage the turn runs
    (fails open) and the warning returned (also logged) names the configured models that were
    not checked, which takes reading them here.
    """
    warnings: list[str] = []
    if requested:
        warning = await ensure_known_model(catalog, requested)
        if warning:
            warnings.append(warning)
    view = await catalog.view()
    if view.fresh:
        return TurnModelCheck(view.models, "; ".join(warnings) or None)
    agents_call = runner.ListAgents(pb.ListAgentsRequest())
    settings: pb.AgentRuntimeSettings | None = None
    if requested:
        agents = await agents_call
    else:
        settings_call = runner.GetAgentRuntimeSettings(pb.GetAgentRuntimeSettingsRequest())
        agents, settings = await asyncio.gather(agents_call, settings_call)
    listed = set(view.models)
    missing = [entry for entry in turn_models(agents.agents, requested, settings) if entry.model not in listed]
    if missing:
        models = ", ".join(repr(entry.model) for entry in missing)
        logger.warning("unchecked configured models accepted", extra={"models": models, "reason": view.warning})
        warnings.append(f"configured model(s) {models} were not checked: {view.warning}")
    return TurnModelCheck(None, "; ".join(warnings) or None)
