"""Settings of the browser-bridge service, built at start."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from popagent_core.settings import ServiceSettings, grpc_address_field


class Settings(ServiceSettings):
    grpc_address: str = grpc_address_field("browser-bridge")
    # The secrets service: the bound values every result is scrubbed of, and useBrowserSecret's plaintext.
    secrets_address: str = grpc_address_field("secrets")
    # BifrOSt's protected Unix socket (owned by this user, mode 0600); unset: the browser is unavailable.
    browser_socket: Path | None = Field(default=None, validation_alias="POPAGENT_BROWSER_SOCKET")
    # The MCP endpoint as addressed over the socket; its host:port is the Host header the server checks.
    browser_mcp_url: str = Field(default="http://127.0.0.1:8000/mcp", validation_alias="POPAGENT_BROWSER_MCP_URL")
    # One browser operation's bound (a page that never settles answers a timeout, not a hang).
    browser_call_timeout_s: float = Field(
        default=60.0, gt=0, le=600, validation_alias="POPAGENT_BROWSER_CALL_TIMEOUT_S"
    )
    # How long a call waits for a reconnect in progress before it answers "unavailable".
    browser_connect_wait_s: float = Field(default=3.0, ge=0, le=60, validation_alias="POPAGENT_BROWSER_CONNECT_WAIT_S")
    # Where each browser profile keeps its browser state (one directory per profile); unset: no profiles.
    browser_profiles_dir: Path | None = Field(default=None, validation_alias="POPAGENT_BROWSER_PROFILES_DIR")
    # A chat session's recording keeps at most this many frames and bytes of screenshots (oldest dropped).
    browser_recording_max_frames: int = Field(
        default=200, ge=1, le=10_000, validation_alias="POPAGENT_BROWSER_RECORDING_MAX_FRAMES"
    )
    browser_recording_max_bytes: int = Field(
        default=32 * 1024 * 1024,
        ge=64 * 1024,
        le=1024 * 1024 * 1024,
        validation_alias="POPAGENT_BROWSER_RECORDING_MAX_BYTES",
    )
