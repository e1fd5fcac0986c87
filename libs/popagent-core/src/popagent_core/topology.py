"""The services of a popagent stack: the one list every other part reads.

Internal authentication (which callers get a credential), the NATS streams (which owners
have one), the default gRPC ports, the `make run` launcher and the deploy checks
(Dockerfile, compose) all take the services from here, so adding or renaming a service is
one edit here plus its own package.

A service's name is also its caller identity in internal authentication (the `<caller>`
of its `POPAGENT_INTERNAL_TOKEN`), its NATS user, its compose service and its launcher child.
Which credentials each service is given (SECRET_VARIABLES) and whose tokens each gRPC service
accepts (CALLERS) are here too: the launcher and compose scope every process by them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Service:
    name: str
    # What `python -m` runs, in the image and under the launcher.
    module: str
    # Loopback port it listens on when POPAGENT_<NAME>_ADDR is unset; None: it serves no gRPC.
    grpc_port: int | None
    # The `<owner>` of its NATS subjects `popagent.<owner>.<entity>.<event>` and of its
    # JetStream stream; None: it publishes no facts.
    subjects_owner: str | None

    @property
    def address_variable(self) -> str:
        """`POPAGENT_AGENT_RUNNER_ADDR`: where it listens, and where its clients dial it."""
        return f"POPAGENT_{self.name.upper().replace('-', '_')}_ADDR"


# In start order: the launcher starts them in this order and stops them in reverse, the gateway
# (which calls every other one) first.
SERVICES: tuple[Service, ...] = (
    Service("hooks", "popagent_hooks", 50152, "hooks"),
    Service("secrets", "popagent_secrets", 50155, "secrets"),
    Service("evolution", "popagent_evolution", 50154, "evolution"),
    Service("browser-bridge", "popagent_browser_bridge", 50156, "browser_bridge"),
    Service("tasks", "popagent_tasks", 50153, "tasks"),
    Service("agent-runner", "popagent_agent_runner", 50151, "agent_runner"),
    # The gateway publishes the observability domain's facts (negative feedback) and owns no table.
    Service("gateway", "popagent_gateway", None, "observability"),
)

SERVICE_NAMES: tuple[str, ...] = tuple(service.name for service in SERVICES)
GRPC_SERVICES: tuple[Service, ...] = tuple(service for service in SERVICES if service.grpc_port is not None)


def service_named(name: str) -> Service:
    for service in SERVICES:
        if service.name == name:
            return service
    raise ValueError(f"unknown service {name!r}; the services are {', '.join(SERVICE_NAMES)}")


_EVERY_SERVICE = frozenset(SERVICE_NAMES)

# The variables that carry a credential, and the services each one is given to. The `make run`
# launcher builds every child's environment from this table (popagent_dev.launcher) and
# deploy/compose.yaml scopes its containers the same way (tests/deploy checks both), so a
# compromised process holds only its own keys. A variable named like a credential that is not
# listed here reaches no service (CREDENTIAL_NAME).
SECRET_VARIABLES: dict[str, frozenset[str]] = {
    # Every service keeps its state there and writes its spans to the observability store
    # (the gateway also reads them, and checks both for /api/health).
    "DATABASE_URL": _EVERY_SERVICE,
    "OBSERVABILITY_DATABASE_URL": _EVERY_SERVICE,
    # Each service's own NATS user and password (in the URL); its subjects are limited to its own.
    "NATS_URL": _EVERY_SERVICE,
    # Each service's own token (`<service>.<random>`), never another's.
    "POPAGENT_INTERNAL_TOKEN": _EVERY_SERVICE,
    # The digests of the callers each gRPC service answers (CALLERS); the gateway answers none.
    "POPAGENT_INTERNAL_CALLERS": frozenset(name for name in SERVICE_NAMES if name != "gateway"),
    # The key of the HTTP API: only the gateway checks it.
    "POPAGENT_API_KEY": frozenset({"gateway"}),
    # The AES keys of the secrets store.
    "POPAGENT_SECRET_KEY": frozenset({"secrets"}),
    "POPAGENT_SECRET_PREVIOUS_KEYS": frozenset({"secrets"}),
    # The model gateway: the catalog (gateway), the turns (agent-runner) and reflection (evolution).
    "NINEROUTER_API_KEY": frozenset({"gateway", "agent-runner", "evolution"}),
    # The hook handlers' signing secrets are in the document.
    "POPAGENT_HOOKS": frozenset({"hooks"}),
}

# A variable of the launcher's own environment named like this is a credential: it reaches a
# service only when SECRET_VARIABLES lists it for that service. Matched on the name's words
# (between underscores), so `OPENAI_API_KEY`, `AWS_SECRET_ACCESS_KEY`, `GITHUB_TOKEN` and
# `PGPASSWORD` are credentials and `POPAGENT_SECRETS_ADDR` (the secrets service's address) is not.
CREDENTIAL_NAME = re.compile(
    r"(?:^|_)(?:[A-Z]*(?:PASSWORD|PASSWD|TOKEN|CREDENTIALS?)[A-Z]*|SECRET|KEYS?|APIKEY|AUTH)(?:_|$)", re.IGNORECASE
)

# Who calls each gRPC service: its POPAGENT_INTERNAL_CALLERS lists only these, so the token of
# any other service is refused there (read from each service's `open_channel` calls).
CALLERS: dict[str, frozenset[str]] = {
    "hooks": frozenset({"gateway", "agent-runner", "tasks"}),
    # agent-runner keeps the bearer tokens of users' MCP servers there.
    "secrets": frozenset({"gateway", "browser-bridge", "agent-runner"}),
    # tasks reads the autonomy settings (its self-update scheduler).
    "evolution": frozenset({"gateway", "agent-runner", "tasks"}),
    # tasks closes a task's browser tab when the task ends (its browser-close observer).
    "browser-bridge": frozenset({"gateway", "agent-runner", "tasks"}),
    "tasks": frozenset({"gateway"}),
    "agent-runner": frozenset({"gateway", "tasks", "evolution"}),
}


def holds(service: str, variable: str) -> bool:
    """Whether `service` is given the credential-bearing `variable` (SECRET_VARIABLES)."""
    return service in SECRET_VARIABLES.get(variable, frozenset())
