"""A chat turn refused before it starts when an agent it may run would use a model the catalog lacks.

The gateway holds the model catalog; it sends the listed ids with the turn (`listed_models`)
when its answer is current. The check is here, on the agents and the default this turn's
prelude already read, so a chat costs no extra calls to learn what it may run on. Texts name
the setting and the route whose PATCH fixes it, as the gateway's /api/models listing does.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from popagent_agent_runner.context.deps import SUPERVISOR_ID
from popagent_agent_runner.state.profiles import AgentProfile
from popagent_core.errors import InvalidArgument


def refuse_unlisted_models(
    profiles: Mapping[str, AgentProfile], default_model: str, requested: str, listed: Collection[str]
) -> None:
    """InvalidArgument naming each configured model the turn may run on that `listed` lacks.

    The turn's agents are the supervisor and every specialist it may delegate to; each runs on
    its override, else on the requested model, else on the persisted default.
    """
    missing: dict[str, None] = {}
    default_missing = False
    for agent in profiles.values():
        if agent.id != SUPERVISOR_ID and not agent.delegation_eligible:
            continue
        if agent.model:
            if agent.model not in listed:
                missing[f"agent {agent.id!r}'s model override {agent.model!r} (model of /api/agents/{agent.id})"] = None
        elif not requested and default_model not in listed:
            default_missing = True
            missing[f"the default model {default_model!r} (defaultModel of /api/settings/agent-runtime)"] = None
    if missing:
        fix = "set a listed model there" + (", or send `model` with the chat" if default_missing else "")
        raise InvalidArgument(f"{'; '.join(missing)}: not listed by the model catalog; {fix}")
