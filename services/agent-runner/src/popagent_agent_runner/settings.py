"""Settings of the agent-runner service, built at start."""

from __future__ import annotations

from popagent_core.settings import DEFAULT_PORTS, ServiceSettings, grpc_address_field


class Settings(ServiceSettings):
    grpc_address: str = grpc_address_field("agent-runner", DEFAULT_PORTS["agent-runner"])
