"""Every NATS subject and stream name, in one greppable place.

Facts are `popagent.<owner>.<entity>.<past-tense>`; each owning service has one
JetStream stream over `popagent.<owner>.>`. The owners are the services' `subjects_owner`
(popagent_core.topology).
"""

from __future__ import annotations

from popagent_core.topology import SERVICES

OWNERS: tuple[str, ...] = tuple(service.subjects_owner for service in SERVICES if service.subjects_owner)

SESSION_DELETED = "popagent.agent_runner.session.deleted"
TURN_COMPLETED = "popagent.agent_runner.turn.completed"
AGENT_RUNTIME_SETTINGS_CHANGED = "popagent.agent_runner.runtime_settings.changed"
TASK_ENQUEUED = "popagent.tasks.task.enqueued"
SECRET_CHANGED = "popagent.secrets.secret.changed"
# The browser settings changed: agent-runner drops its cached copy (published directly, not through
# the outbox: only the next turn's read needs it, and it must arrive before that turn).
BROWSER_SETTINGS_CHANGED = "popagent.browser_bridge.settings.changed"
# A user gave an answer a thumbs down: an outcome the evolution loop can learn from.
NEGATIVE_FEEDBACK_GIVEN = "popagent.observability.feedback.given"
# What learning wrote for agents (an overlay, a learned skill, a revert, an adoption, an
# autonomy change) changed: agent runs re-read it.
LEARNING_CHANGED = "popagent.evolution.learning.changed"


def inbox_prefix(name: str) -> str:
    """The prefix of client `name`'s reply subjects (`_INBOX.<name>.…`): a service's NATS user may
    subscribe to its own replies only, never to another service's (popagent_dev.embedded)."""
    return f"_INBOX.{name}"


# Chat turns' logs (every batch a turn streams, for followers): one subject per turn in a stream of
# its own, written and read by agent-runner only. Not facts: no owner stream captures them.
TURN_LOG_STREAM = "POPAGENT_TURN_LOG"
TURN_LOG_SUBJECT_PREFIX = "popagent_turn_log"
# agent-runner processes announce themselves here (core NATS, no stream): gateways route turns to
# the runners they heard from lately (popagent_agent_runner.turn.peers).
RUNNER_PRESENCE = "popagent_runner_presence"
# A gateway that starts asks every runner to announce itself now.
RUNNER_PRESENCE_ASK = "popagent_runner_presence_ask"
# Commands for a turn, to the runner holding it: `popagent_turn_control.<runner key>`, request/reply.
TURN_CONTROL_PREFIX = "popagent_turn_control"


def stream_name(owner: str) -> str:
    """`POPAGENT_TASKS` for owner `tasks`."""
    if owner not in OWNERS:
        raise ValueError(f"unknown subject owner {owner!r}")
    return f"POPAGENT_{owner.upper()}"


def stream_subjects(owner: str) -> list[str]:
    return [f"popagent.{owner}.>"]


def owner_of(subject: str) -> str:
    parts = subject.split(".")
    if len(parts) < 4 or parts[0] != "popagent" or parts[1] not in OWNERS:
        raise ValueError(f"subject {subject!r} is not popagent.<owner>.<entity>.<event>")
    return parts[1]
