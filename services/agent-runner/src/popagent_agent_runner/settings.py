"""Settings of the agent-runner service, built at start."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from popagent_core.settings import DEFAULT_PORTS, ServiceSettings, grpc_address_field


class Settings(ServiceSettings):
    grpc_address: str = grpc_address_field("agent-runner", DEFAULT_PORTS["agent-runner"])
    hooks_address: str = grpc_address_field("hooks", DEFAULT_PORTS["hooks"])
    browser_bridge_address: str = grpc_address_field("browser-bridge", DEFAULT_PORTS["browser-bridge"])
    # Registered repository paths are relative to this folder and must resolve inside it.
    workspace_root: Path = Field(default=Path("workspace"), validation_alias="POPAGENT_WORKSPACE_ROOT")
    # A deletion left half-done (hidden row) for this long is finished by the start-up sweep.
    pending_deletion_grace_s: float = Field(default=60.0, ge=0, validation_alias="POPAGENT_PENDING_DELETION_GRACE_S")
