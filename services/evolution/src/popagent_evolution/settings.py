"""Settings of the evolution service, built at start."""

from __future__ import annotations

from pydantic import Field, field_validator

from popagent_core.settings import DialAddresses, ServiceSettings, check_above, grpc_address_field


def _env(name: str) -> str:
    return f"POPAGENT_EVOLUTION_{name}"


class Settings(ServiceSettings):
    grpc_address: str = grpc_address_field("evolution")
    # Reflection asks the model gateway, on the default model agent-runner's settings name.
    ninerouter_url: str = Field(default="http://127.0.0.1:20128/v1", validation_alias="NINEROUTER_URL")
    ninerouter_api_key: str = Field(default="", validation_alias="NINEROUTER_API_KEY", repr=False)
    agent_runner_address: DialAddresses = grpc_address_field("agent-runner")

    # The worker: how often it looks for due signals, how many it claims at once, when a claim
    # counts as abandoned, and the capped exponential backoff of a failed attempt.
    worker_enabled: bool = Field(default=True, validation_alias=_env("WORKER_ENABLED"))
    poll_interval_s: float = Field(default=10.0, gt=0, validation_alias=_env("POLL_INTERVAL_S"))
    batch_size: int = Field(default=20, ge=1, le=200, validation_alias=_env("BATCH_SIZE"))
    reflection_timeout_s: float = Field(default=120.0, gt=0, validation_alias=_env("REFLECTION_TIMEOUT_S"))
    claim_timeout_s: float = Field(default=600.0, gt=0, validation_alias=_env("CLAIM_TIMEOUT_S"))
    retry_base_s: float = Field(default=30.0, gt=0, validation_alias=_env("RETRY_BASE_S"))
    retry_cap_s: float = Field(default=3600.0, gt=0, validation_alias=_env("RETRY_CAP_S"))
    max_attempts: int = Field(default=5, ge=1, le=100, validation_alias=_env("MAX_ATTEMPTS"))
    # A new signal waits this long before it is due, so a burst of failures is reflected on together.
    signal_delay_s: float = Field(default=30.0, ge=0, validation_alias=_env("SIGNAL_DELAY_S"))
    # The outcome consumer's ack_wait (in-progress acks keep a slow handler's message).
    ack_wait_s: float = Field(default=30.0, gt=0, validation_alias=_env("ACK_WAIT_S"))

    @field_validator("ninerouter_url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http(s) URL")
        return value.rstrip("/")

    _claim_timeout = check_above(
        "claim_timeout_s", "reflection_timeout_s", "must be longer than POPAGENT_EVOLUTION_REFLECTION_TIMEOUT_S"
    )
    _retry_cap = check_above(
        "retry_cap_s", "retry_base_s", "must be at least POPAGENT_EVOLUTION_RETRY_BASE_S", or_equal=True
    )
