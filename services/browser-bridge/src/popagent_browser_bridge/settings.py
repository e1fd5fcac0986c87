"""Settings of the browser-bridge service, built at start."""

from __future__ import annotations

from popagent_core.settings import ServiceSettings, grpc_address_field


class Settings(ServiceSettings):
    grpc_address: str = grpc_address_field("browser-bridge")
