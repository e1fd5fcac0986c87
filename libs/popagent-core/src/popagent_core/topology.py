"""The services of a popagent stack: the one list every other part reads.

Internal authentication (which callers get a credential), the NATS streams (which owners
have one), the default gRPC ports, the `make run` launcher and the deploy checks
(Dockerfile, compose) all take the services from here, so adding or renaming a service is
one edit here plus its own package.

A service's name is also its caller identity in internal authentication (the `<caller>`
of its `POPAGENT_INTERNAL_TOKEN`), its compose service and its launcher child.
"""

from __future__ import annotations

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
