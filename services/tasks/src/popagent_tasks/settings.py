"""Settings of the tasks service, built at start.

The worker's concurrency and timing belong to agent-runner's agent-runtime settings
(`popagent_agent_runtime_settings`): with the agent-runner executor they are read from
agent-runner when the worker starts and on every change it publishes; these variables
are the fallback for executors that have no agent-runner to ask (tests' own).
"""

from __future__ import annotations

from pydantic import AliasChoices, Field, field_validator

from popagent_core.settings import DialAddressesOrNone, ServiceSettings, check_above, grpc_address_field
from popagent_tasks.schedules import check_timezone, server_timezone


def _env(name: str) -> str:
    return f"POPAGENT_TASKS_{name}"


class Settings(ServiceSettings):
    grpc_address: str = grpc_address_field("tasks")
    hooks_address: str = grpc_address_field("hooks")
    # Where the agent-runner executor runs task turns (one address, or its workers as a list of
    # IPv4:port, spread round robin); empty: no agent-runner is configured.
    agent_runner_address: DialAddressesOrNone = Field(
        default="", validation_alias=AliasChoices("POPAGENT_AGENT_RUNNER_ADDR")
    )
    # TaskStart/TaskStop go to the hooks service; off only where no hooks service runs.
    hooks_enabled: bool = Field(default=True, validation_alias=_env("HOOKS_ENABLED"))
    # A task's browser tab is closed through browser-bridge when the task ends; off only where no
    # browser-bridge runs.
    browser_bridge_address: str = grpc_address_field("browser-bridge")
    browser_close_enabled: bool = Field(default=True, validation_alias=_env("BROWSER_CLOSE_ENABLED"))

    # The self-update scheduler reads the autonomy settings there (and the agents' state from
    # agent-runner); off where no evolution service runs.
    evolution_address: str = grpc_address_field("evolution")
    self_update_scheduler_enabled: bool = Field(default=True, validation_alias=_env("SELF_UPDATE_SCHEDULER_ENABLED"))
    self_update_reconcile_s: float = Field(default=30.0, gt=0, validation_alias=_env("SELF_UPDATE_RECONCILE_S"))

    # `module:attribute` of the executor factory. Empty: this process runs no worker
    # (the API, scheduler and recovery still run; tasks wait for a worker).
    executor: str = Field(default="", validation_alias=_env("EXECUTOR"))
    scheduler_enabled: bool = Field(default=True, validation_alias=_env("SCHEDULER_ENABLED"))
    # Schedules are computed in the server's timezone; the API cannot write it.
    timezone: str = Field(default_factory=server_timezone, validation_alias=_env("TIMEZONE"))

    concurrency: int = Field(default=10, ge=1, le=1000, validation_alias=_env("CONCURRENCY"))
    claim_batch: int = Field(default=50, ge=1, le=1000, validation_alias=_env("CLAIM_BATCH"))
    task_timeout_s: float = Field(default=1800.0, gt=0, validation_alias=_env("TIMEOUT_S"))
    # How long an aborted executor gets to settle while it keeps its slot.
    abort_ack_s: float = Field(default=10.0, gt=0, validation_alias=_env("ABORT_ACK_S"))
    heartbeat_interval_s: float = Field(default=2.0, gt=0, validation_alias=_env("HEARTBEAT_INTERVAL_S"))
    # A live attempt whose heartbeat is older than this is an orphan of a dead worker.
    heartbeat_timeout_s: float = Field(default=20.0, gt=0, validation_alias=_env("HEARTBEAT_TIMEOUT_S"))
    # An orphan older than this is stale: failed instead of replayed.
    stale_after_s: float = Field(default=6 * 3600.0, gt=0, validation_alias=_env("STALE_AFTER_S"))
    poll_interval_s: float = Field(default=1.0, gt=0, validation_alias=_env("POLL_INTERVAL_S"))
    sweep_interval_s: float = Field(default=5.0, gt=0, validation_alias=_env("SWEEP_INTERVAL_S"))
    retry_base_s: float = Field(default=5.0, gt=0, validation_alias=_env("RETRY_BASE_S"))
    retry_cap_s: float = Field(default=300.0, gt=0, validation_alias=_env("RETRY_CAP_S"))
    # On stop, in-flight attempts get this long to finish before they are aborted.
    shutdown_grace_s: float = Field(default=10.0, ge=0, validation_alias=_env("SHUTDOWN_GRACE_S"))
    pool_max_size: int = Field(default=10, ge=2, le=200, validation_alias=_env("POOL_MAX_SIZE"))

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, value: str) -> str:
        return check_timezone(value)

    @field_validator("executor")
    @classmethod
    def _executor(cls, value: str) -> str:
        if value and value.count(":") != 1:
            raise ValueError("must be 'package.module:attribute'")
        return value

    _heartbeat_timeout = check_above(
        "heartbeat_timeout_s",
        "heartbeat_interval_s",
        "must exceed twice POPAGENT_TASKS_HEARTBEAT_INTERVAL_S",
        factor=2,
    )
    _stale_after = check_above("stale_after_s", "heartbeat_timeout_s", "must exceed POPAGENT_TASKS_HEARTBEAT_TIMEOUT_S")
    _retry_cap = check_above(
        "retry_cap_s", "retry_base_s", "must be at least POPAGENT_TASKS_RETRY_BASE_S", or_equal=True
    )
