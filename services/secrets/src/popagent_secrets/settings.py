"""Settings of the secrets service, built at start."""

from __future__ import annotations

from popagent_core.settings import DEFAULT_PORTS, ServiceSettings, grpc_address_field


class Settings(ServiceSettings):
    grpc_address: str = grpc_address_field("secrets", DEFAULT_PORTS["secrets"])
