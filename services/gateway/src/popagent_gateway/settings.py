"""Gateway settings, built at start."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from popagent_core.settings import (
    DialAddresses,
    NatsUrlsOrNone,
    PostgresUrl,
    ProcessSettings,
    grpc_address_field,
    split_addresses,
)
from popagent_gateway.serving import EdgeLimits
from popagent_gateway.ui import DEFAULT_UI_DIR


class Settings(ProcessSettings):
    """DATABASE_URL, POPAGENT_LOG_LEVEL and POPAGENT_INTERNAL_TOKEN come from the kernel's base.

    The gateway owns no tables: it only checks both stores answer (readiness).
    """

    host: str = Field(default="127.0.0.1", validation_alias="POPAGENT_GATEWAY_HOST")
    port: int = Field(default=8080, ge=0, le=65535, validation_alias="POPAGENT_GATEWAY_PORT")
    # When set, every /api request must carry it as `x-popagent-key`.
    api_key: str = Field(default="", validation_alias="POPAGENT_API_KEY", repr=False)
    observability_database_url: PostgresUrl = Field(validation_alias="OBSERVABILITY_DATABASE_URL")
    ui_dir: Path = Field(default=DEFAULT_UI_DIR, validation_alias="POPAGENT_UI_DIR")
    max_body_bytes: int = Field(default=1024 * 1024, ge=1024, validation_alias="POPAGENT_MAX_BODY_BYTES")
    # The edge's connection limits (popagent_gateway.serving): a request head must arrive within
    # HEADER_TIMEOUT_S, a body within BODY_TIMEOUT_S + 1 s per BODY_MIN_RATE bytes, an idle
    # keep-alive connection is closed after IDLE_TIMEOUT_S, and past MAX_CONNECTIONS a new
    # connection gets a 503.
    header_timeout_s: float = Field(default=10.0, gt=0, le=600, validation_alias="POPAGENT_GATEWAY_HEADER_TIMEOUT_S")
    body_timeout_s: float = Field(default=10.0, gt=0, le=600, validation_alias="POPAGENT_GATEWAY_BODY_TIMEOUT_S")
    body_min_rate: int = Field(default=500, ge=1, validation_alias="POPAGENT_GATEWAY_BODY_MIN_RATE")
    idle_timeout_s: float = Field(default=5.0, gt=0, le=3600, validation_alias="POPAGENT_GATEWAY_IDLE_TIMEOUT_S")
    max_connections: int = Field(default=4096, ge=16, validation_alias="POPAGENT_GATEWAY_MAX_CONNECTIONS")
    # A request head (request line and headers) past this is answered 431: the UI's heads are
    # under 2 KiB, and proxies' own limits are 8 to 64 KiB.
    max_head_bytes: int = Field(
        default=32 * 1024, ge=4096, le=1024 * 1024, validation_alias="POPAGENT_GATEWAY_MAX_HEAD_BYTES"
    )
    # /docs and /redoc: FastAPI's pages load Swagger UI and ReDoc from a public CDN (jsDelivr),
    # which runs that CDN's code on the page that holds the API key. Off unless asked for;
    # /openapi.json is always served.
    docs_enabled: bool = Field(default=False, validation_alias="POPAGENT_GATEWAY_DOCS")
    # The gateway's address as its clients reach it (e.g. https://agent.example.com), where a proxy in
    # between changes the scheme, host or path: the A2A agent card names its endpoint under it. Unset:
    # the card names the address the card itself was fetched at.
    public_url: str = Field(default="", validation_alias="POPAGENT_PUBLIC_URL")
    # The model gateway (9Router or any OpenAI-compatible server), e.g. http://127.0.0.1:20128/v1.
    # Unset: /api/models answers an empty catalog with a warning and model checks fail open.
    ninerouter_url: str = Field(default="", validation_alias="NINEROUTER_URL")
    ninerouter_api_key: str = Field(default="", validation_alias="NINEROUTER_API_KEY", repr=False)
    model_catalog_ttl_s: float = Field(default=60.0, gt=0, le=3600, validation_alias="POPAGENT_MODEL_CATALOG_TTL_S")
    # The deadline of every unary call to a service that does not set its own (only the
    # permanent deletions that run session lifecycles do). The streamed chat turn has none.
    rpc_timeout_s: float = Field(default=10.0, gt=0, le=3600, validation_alias="POPAGENT_GATEWAY_RPC_TIMEOUT_S")
    # The services' broker: /api/health reports it (unset: not reported), and negative feedback is
    # published there (popagent_core.subjects.NEGATIVE_FEEDBACK_GIVEN; unset: a thumbs down answers 503).
    # It may carry the gateway's NATS user and password: kept out of the repr, logs and spans.
    nats_url: NatsUrlsOrNone = Field(default="", validation_alias="NATS_URL", repr=False)
    # Set by `make run`: the launcher's state file; /api/health names the children it is restarting.
    supervisor_state: Path | None = Field(default=None, validation_alias="POPAGENT_SUPERVISOR_STATE")

    agent_runner_address: DialAddresses = grpc_address_field("agent-runner")
    hooks_address: str = grpc_address_field("hooks")
    tasks_address: str = grpc_address_field("tasks")
    evolution_address: str = grpc_address_field("evolution")
    secrets_address: str = grpc_address_field("secrets")
    browser_bridge_address: str = grpc_address_field("browser-bridge")

    @property
    def agent_runner_workers(self) -> list[str]:
        """agent-runner's worker processes: a session's turns all go to one of them."""
        return split_addresses(self.agent_runner_address)

    @field_validator("ninerouter_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if value and not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value

    @field_validator("public_url")
    @classmethod
    def _public_url(cls, value: str) -> str:
        # Without its trailing slash: endpoint paths are appended to it.
        return cls._http_url(value).rstrip("/")

    @field_validator("api_key")
    @classmethod
    def _api_key(cls, value: str) -> str:
        if value and len(value) < 16:
            raise ValueError("must be at least 16 characters when set")
        return value

    def edge_limits(self) -> EdgeLimits:
        return EdgeLimits(
            header_timeout_s=self.header_timeout_s,
            body_timeout_s=self.body_timeout_s,
            body_min_rate=self.body_min_rate,
            idle_timeout_s=self.idle_timeout_s,
            max_connections=self.max_connections,
            max_head_bytes=self.max_head_bytes,
        )

    def service_addresses(self) -> dict[str, str]:
        return {
            "agent-runner": self.agent_runner_address,
            "hooks": self.hooks_address,
            "tasks": self.tasks_address,
            "evolution": self.evolution_address,
            "secrets": self.secrets_address,
            "browser-bridge": self.browser_bridge_address,
        }
