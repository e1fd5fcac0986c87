"""Settings of the agent-runner service, built at start."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from popagent_agent_runner.lsp.languages import DEFAULT_SERVERS_DIR
from popagent_core.settings import ServiceSettings, check_listen_address, grpc_address_field


class Settings(ServiceSettings):
    grpc_address: str = grpc_address_field("agent-runner")
    hooks_address: str = grpc_address_field("hooks")
    browser_bridge_address: str = grpc_address_field("browser-bridge")
    # Learned overlays and skills come from evolution (cached; see learned.py).
    evolution_address: str = grpc_address_field("evolution")
    # The bearer tokens of users' MCP servers are kept there (mcp/tokens.py).
    secrets_address: str = grpc_address_field("secrets")
    # Database connections per worker (opened as needed). Every turn holds one several times before
    # its first token (prelude, storing the prompt) and after it: a pool of 10 makes the prelude wait at
    # a hundred concurrent turns (bench/resilience.py shows it). PostgreSQL's default of
    # 100 connections still leaves room for the other services' pools of 10.
    pool_max_size: int = Field(default=30, ge=2, le=200, validation_alias="POPAGENT_AGENT_RUNNER_POOL_MAX_SIZE")
    # Registered repository paths are relative to this folder and must resolve inside it.
    workspace_root: Path = Field(default=Path("workspace"), validation_alias="POPAGENT_WORKSPACE_ROOT")
    # A deletion left half-done (hidden row) for this long is finished by the start-up sweep.
    pending_deletion_grace_s: float = Field(default=60.0, ge=0, validation_alias="POPAGENT_PENDING_DELETION_GRACE_S")
    # The OpenAI-compatible model gateway every agent reaches its model through (9Router by default).
    ninerouter_url: str = Field(default="http://127.0.0.1:20128/v1", validation_alias="NINEROUTER_URL")
    ninerouter_api_key: str = Field(default="", validation_alias="NINEROUTER_API_KEY", repr=False)
    # webSearch: the self-hosted SearXNG instance (JSON API, no credential).
    searxng_url: str = Field(default="http://127.0.0.1:8889", validation_alias="SEARXNG_URL")
    web_search_timeout_s: float = Field(default=10.0, gt=0, le=120, validation_alias="POPAGENT_WEB_SEARCH_TIMEOUT_S")
    # webFetch: one deadline per fetch (every redirect included) and a cap on the bytes read.
    web_fetch_timeout_s: float = Field(default=15.0, gt=0, le=120, validation_alias="POPAGENT_WEB_FETCH_TIMEOUT_S")
    web_fetch_max_bytes: int = Field(
        default=2 * 1024 * 1024, ge=1024, le=64 * 1024 * 1024, validation_alias="POPAGENT_WEB_FETCH_MAX_BYTES"
    )
    # Opens loopback, private, link-local and CGNAT targets to webFetch (never metadata): tests only.
    web_fetch_allow_private_addresses: bool = Field(
        default=False, validation_alias="POPAGENT_WEB_FETCH_ALLOW_PRIVATE_ADDRESSES"
    )
    # Documentation search: the gateway's embedding model (empty: documentation search is off)
    # and its rerank model (empty: results stay in fused order).
    docs_embedding_model: str = Field(default="", max_length=200, validation_alias="POPAGENT_DOCS_EMBEDDING_MODEL")
    docs_rerank_model: str = Field(default="", max_length=200, validation_alias="POPAGENT_DOCS_RERANK_MODEL")
    # Workspace shell: the processes one command may run (its default timeout is an agent-runtime setting).
    sandbox_max_processes: int = Field(default=256, ge=8, le=65536, validation_alias="POPAGENT_SANDBOX_MAX_PROCESSES")
    # The memory one command may use, and how much a workspace's repository folder may hold on disk.
    sandbox_memory_mb: int = Field(default=2048, ge=64, le=1_048_576, validation_alias="POPAGENT_SANDBOX_MEMORY_MB")
    workspace_disk_mb: int = Field(
        default=10_240, ge=1, le=1_073_741_824, validation_alias="POPAGENT_WORKSPACE_DISK_MB"
    )

    # `recall` adds vector search over the original messages with this gateway embedding model; empty: full text only.
    memory_embedding_model: str = Field(default="", max_length=200, validation_alias="POPAGENT_MEMORY_EMBEDDING_MODEL")

    # Agent-written, unpinned long-term memories not written for this many days are forgotten; 0 keeps them.
    memory_retention_days: int = Field(default=0, ge=0, le=36_500, validation_alias="POPAGENT_MEMORY_RETENTION_DAYS")

    # mastra_workspace_lsp_inspect: language servers running at once (all workspaces), how long an
    # unused one is kept, one request's deadline, and where typescript-language-server is installed.
    lsp_max_servers: int = Field(default=4, ge=1, le=64, validation_alias="POPAGENT_LSP_MAX_SERVERS")
    lsp_idle_timeout_s: float = Field(default=600.0, gt=0, validation_alias="POPAGENT_LSP_IDLE_TIMEOUT_S")
    lsp_request_timeout_s: float = Field(default=30.0, gt=0, le=300, validation_alias="POPAGENT_LSP_REQUEST_TIMEOUT_S")
    language_servers_dir: Path = Field(default=DEFAULT_SERVERS_DIR, validation_alias="POPAGENT_LANGUAGE_SERVERS_DIR")

    # A chat turn's lease (docs/turns.md): renewed three times per lease while the turn runs; a turn
    # whose runner was killed is known lost this long after its last renewal.
    turn_lease_s: float = Field(default=30.0, ge=1, le=3600, validation_alias="POPAGENT_TURN_LEASE_S")
    # How long a tool call waits for a person's approval before it counts as denied (docs/approvals.md).
    approval_timeout_s: float = Field(
        default=86400.0, ge=1, le=30 * 86400, validation_alias="POPAGENT_APPROVAL_TIMEOUT_S"
    )
    # Users' MCP servers (mcp/): one tool call's deadline, how long a call waits for a reconnect before it
    # fails, and how long a turn waits for a server's tool list before it uses the last one.
    mcp_call_timeout_s: float = Field(default=60.0, gt=0, le=3600, validation_alias="POPAGENT_MCP_CALL_TIMEOUT_S")
    mcp_connect_wait_s: float = Field(default=5.0, ge=0, le=120, validation_alias="POPAGENT_MCP_CONNECT_WAIT_S")
    mcp_list_timeout_s: float = Field(default=5.0, gt=0, le=120, validation_alias="POPAGENT_MCP_LIST_TIMEOUT_S")
    # Channels (docs/channels.md): a streamed reply's message is edited at most once per this interval.
    channel_edit_interval_s: float = Field(
        default=1.0, ge=0.05, le=60, validation_alias="POPAGENT_CHANNEL_EDIT_INTERVAL_S"
    )
    # Edits of a reply's message stop this long after it was posted and the reply goes on in a fresh one
    # (0: no window; a platform's refusal of a too-old edit rolls over all the same).
    channel_edit_window_s: float = Field(
        default=0.0, ge=0, le=7 * 86400, validation_alias="POPAGENT_CHANNEL_EDIT_WINDOW_S"
    )
    # The address gateways dial this runner at, announced with its presence (docs/turns.md, Routing).
    # Empty: its listen address with the port it got (this host's name when it listens on every interface).
    advertise_address: str = Field(default="", validation_alias="POPAGENT_AGENT_RUNNER_ADVERTISE_ADDR")

    @field_validator("grpc_address")
    @classmethod
    def _one_address(cls, value: str) -> str:
        return check_listen_address(value)

    @field_validator("advertise_address")
    @classmethod
    def _host_and_port(cls, value: str) -> str:
        host, _, port = value.rpartition(":")
        if value and (not host or "," in value or not port.isdigit() or not 0 < int(port) < 65536):
            raise ValueError("must be one host:port that gateways can dial")
        return value

    @field_validator("ninerouter_url", "searxng_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http(s) URL")
        return value
