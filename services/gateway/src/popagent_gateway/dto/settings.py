"""Settings singletons: agent-runtime and memory (agent-runner), autonomy (evolution), browser (browser-bridge).

Each PATCH body is partial; the per-field bounds here match the owning service's rules
(tests check they agree), and the owner also checks cross-field rules on the merged row.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field
from pydantic.json_schema import SkipJsonSchema

from popagent_gateway.dto import PatchModel, WireModel
from popagent_gateway.dto.schedules import CRON_PATTERN

# The evolution service's bound is 100 characters (the schedules' is 120).
Cron = Annotated[str, Field(min_length=9, max_length=100, pattern=CRON_PATTERN)]

Model = Annotated[str, Field(min_length=1, max_length=200)]
Feedback = Annotated[str, Field(min_length=1, max_length=4000)]
Guidance = Annotated[str, Field(max_length=8000)]
Fraction = Annotated[float, Field(ge=0.05, le=0.95)]
BlockAfter = Annotated[float, Field(ge=1.0, le=4.0)]

SupervisorSteps = Annotated[int, Field(ge=2, le=200)]
SpecialistSteps = Annotated[int, Field(ge=1, le=200)]
ToolCalls = Annotated[int, Field(ge=1, le=32)]
Retries = Annotated[int, Field(ge=0, le=10)]
ContextChars = Annotated[int, Field(ge=0, le=500_000)]
ResultChars = Annotated[int, Field(ge=256, le=500_000)]
TaskConcurrency = Annotated[int, Field(ge=1, le=64)]
PollMs = Annotated[int, Field(ge=100, le=600_000)]
HeartbeatMs = Annotated[int, Field(ge=100, le=600_000)]
HeartbeatTimeoutMs = Annotated[int, Field(ge=1_000, le=3_600_000)]
AttemptTimeoutMs = Annotated[int, Field(ge=1_000, le=86_400_000)]
AbortAckMs = Annotated[int, Field(ge=100, le=600_000)]
RetryBaseMs = Annotated[int, Field(ge=100, le=3_600_000)]
RetryCapMs = Annotated[int, Field(ge=100, le=86_400_000)]
CommandTimeoutMs = Annotated[int, Field(ge=1_000, le=600_000)]
Tokens = Annotated[int, Field(ge=1_000, le=1_000_000)]
RetainedMessages = Annotated[int, Field(ge=0, le=1_000)]
IdleSeconds = Annotated[int, Field(ge=0, le=86_400)]
PreviousObservationTokens = Annotated[int, Field(ge=0, le=100_000)]
RetrievalScope = Literal["thread", "resource"]


class AgentRuntimeSettingsOut(WireModel):
    default_model: str
    supervisor_max_steps: int
    specialist_max_steps: int
    max_concurrent_tool_calls: int
    max_processor_retries: int
    final_response_feedback: str
    delegation_context_max_chars: int
    delegation_result_max_chars: int
    delegation_failure_text: str
    delegation_truncation_text: str
    task_concurrency: int
    task_poll_interval_ms: int
    task_heartbeat_interval_ms: int
    task_heartbeat_timeout_ms: int
    task_attempt_timeout_ms: int
    task_abort_ack_timeout_ms: int
    task_retry_base_ms: int
    task_retry_cap_ms: int
    command_timeout_ms: int
    continue_on_disconnect: bool
    updated_at: str


class AgentRuntimeSettingsPatch(PatchModel):
    default_model: Model | SkipJsonSchema[None] = Field(default=None, description="must be in the model catalog")
    supervisor_max_steps: SupervisorSteps | SkipJsonSchema[None] = None
    specialist_max_steps: SpecialistSteps | SkipJsonSchema[None] = None
    max_concurrent_tool_calls: ToolCalls | SkipJsonSchema[None] = None
    max_processor_retries: Retries | SkipJsonSchema[None] = None
    final_response_feedback: Feedback | SkipJsonSchema[None] = None
    delegation_context_max_chars: ContextChars | SkipJsonSchema[None] = None
    delegation_result_max_chars: ResultChars | SkipJsonSchema[None] = None
    delegation_failure_text: Feedback | SkipJsonSchema[None] = None
    delegation_truncation_text: Feedback | SkipJsonSchema[None] = None
    task_concurrency: TaskConcurrency | SkipJsonSchema[None] = None
    task_poll_interval_ms: PollMs | SkipJsonSchema[None] = None
    task_heartbeat_interval_ms: HeartbeatMs | SkipJsonSchema[None] = None
    task_heartbeat_timeout_ms: HeartbeatTimeoutMs | SkipJsonSchema[None] = Field(
        default=None, description="must be greater than taskHeartbeatIntervalMs"
    )
    task_attempt_timeout_ms: AttemptTimeoutMs | SkipJsonSchema[None] = Field(
        default=None, description="must be greater than taskHeartbeatIntervalMs"
    )
    task_abort_ack_timeout_ms: AbortAckMs | SkipJsonSchema[None] = None
    task_retry_base_ms: RetryBaseMs | SkipJsonSchema[None] = None
    task_retry_cap_ms: RetryCapMs | SkipJsonSchema[None] = Field(
        default=None, description="must be at least taskRetryBaseMs"
    )
    command_timeout_ms: CommandTimeoutMs | SkipJsonSchema[None] = Field(
        default=None, description="workspace shell: timeout of a command that names none (at most 600000)"
    )
    continue_on_disconnect: bool | SkipJsonSchema[None] = Field(
        default=None, description="a chat turn runs on to its end when its client goes away"
    )


MEMORY_SETTING_HELP: dict[str, str] = {
    "enabled": "observational memory on: long threads are sent as observations plus recent messages; off: every turn replays the whole thread",
    "observation_message_tokens": "unobserved message tokens (o200k) past which the Observer turns the oldest messages into observations",
    "reflection_observation_tokens": "observation-log tokens past which the Reflector condenses the log (the previous version is kept)",
    "raw_history_retention_messages": "the newest messages always kept raw (never observed) after an observation",
    "async_observation_enabled": "observe in the background between turns; a turn then waits only at observationBlockAfter",
    "observation_buffer_activation": "fraction of the observation threshold at which background observation starts",
    "observation_block_after": "multiple of the observation threshold at which a turn waits for observation",
    "async_reflection_enabled": "reflect in the background; a turn then waits only at reflectionBlockAfter",
    "reflection_buffer_activation": "fraction of the reflection threshold at which background reflection starts",
    "reflection_block_after": "multiple of the reflection threshold at which a turn waits for reflection",
    "idle_activation_seconds": "background observations join the context after this long without a turn; 0 disables",
    "activate_on_provider_change": "background observations join the context when the next turn uses another model",
    "shared_budget": "raw messages may use what the observation log leaves of the reflection budget; requires both async buffers off",
    "previous_observation_max_tokens": "how many tokens of the newest earlier observations the Observer sees; 0: none",
    "temporal_markers": "mark gaps of 10 minutes or more between messages (and before the prompt) with the time that passed",
    "forward_attachments": "send attachments (images, files) to the Observer itself instead of naming them",
    "retrieval_scope": "what recall searches: thread, this conversation only; resource, every popagent-user conversation",
    "observer_instructions": "extra guidance appended to the Observer's instructions",
    "reflector_instructions": "extra guidance appended to the Reflector's instructions",
}
"""One line per memory setting: the OpenAPI description of each field (the settings page shows it)."""


class MemorySettingsOut(WireModel):
    enabled: bool = Field(description=MEMORY_SETTING_HELP["enabled"])
    observation_message_tokens: int = Field(description=MEMORY_SETTING_HELP["observation_message_tokens"])
    reflection_observation_tokens: int = Field(description=MEMORY_SETTING_HELP["reflection_observation_tokens"])
    raw_history_retention_messages: int = Field(description=MEMORY_SETTING_HELP["raw_history_retention_messages"])
    async_observation_enabled: bool = Field(description=MEMORY_SETTING_HELP["async_observation_enabled"])
    observation_buffer_activation: float = Field(description=MEMORY_SETTING_HELP["observation_buffer_activation"])
    observation_block_after: float = Field(description=MEMORY_SETTING_HELP["observation_block_after"])
    async_reflection_enabled: bool = Field(description=MEMORY_SETTING_HELP["async_reflection_enabled"])
    reflection_buffer_activation: float = Field(description=MEMORY_SETTING_HELP["reflection_buffer_activation"])
    reflection_block_after: float = Field(description=MEMORY_SETTING_HELP["reflection_block_after"])
    idle_activation_seconds: int = Field(description=MEMORY_SETTING_HELP["idle_activation_seconds"])
    activate_on_provider_change: bool = Field(description=MEMORY_SETTING_HELP["activate_on_provider_change"])
    shared_budget: bool = Field(description=MEMORY_SETTING_HELP["shared_budget"])
    previous_observation_max_tokens: int = Field(description=MEMORY_SETTING_HELP["previous_observation_max_tokens"])
    temporal_markers: bool = Field(description=MEMORY_SETTING_HELP["temporal_markers"])
    forward_attachments: bool = Field(description=MEMORY_SETTING_HELP["forward_attachments"])
    retrieval_scope: RetrievalScope = Field(description=MEMORY_SETTING_HELP["retrieval_scope"])
    observer_instructions: str = Field(description=MEMORY_SETTING_HELP["observer_instructions"])
    reflector_instructions: str = Field(description=MEMORY_SETTING_HELP["reflector_instructions"])
    updated_at: str


class MemorySettingsPatch(PatchModel):
    enabled: bool | SkipJsonSchema[None] = Field(default=None, description=MEMORY_SETTING_HELP["enabled"])
    observation_message_tokens: Tokens | SkipJsonSchema[None] = Field(
        default=None, description=MEMORY_SETTING_HELP["observation_message_tokens"]
    )
    reflection_observation_tokens: Tokens | SkipJsonSchema[None] = Field(
        default=None, description=MEMORY_SETTING_HELP["reflection_observation_tokens"]
    )
    raw_history_retention_messages: RetainedMessages | SkipJsonSchema[None] = Field(
        default=None, description=MEMORY_SETTING_HELP["raw_history_retention_messages"]
    )
    async_observation_enabled: bool | SkipJsonSchema[None] = Field(
        default=None, description=MEMORY_SETTING_HELP["async_observation_enabled"]
    )
    observation_buffer_activation: Fraction | SkipJsonSchema[None] = Field(
        default=None, description=MEMORY_SETTING_HELP["observation_buffer_activation"]
    )
    observation_block_after: BlockAfter | SkipJsonSchema[None] = Field(
        default=None, description=MEMORY_SETTING_HELP["observation_block_after"]
    )
    async_reflection_enabled: bool | SkipJsonSchema[None] = Field(
        default=None, description=MEMORY_SETTING_HELP["async_reflection_enabled"]
    )
    reflection_buffer_activation: Fraction | SkipJsonSchema[None] = Field(
        default=None, description=MEMORY_SETTING_HELP["reflection_buffer_activation"]
    )
    reflection_block_after: BlockAfter | SkipJsonSchema[None] = Field(
        default=None, description=MEMORY_SETTING_HELP["reflection_block_after"]
    )
    idle_activation_seconds: IdleSeconds | SkipJsonSchema[None] = Field(
        default=None, description=MEMORY_SETTING_HELP["idle_activation_seconds"]
    )
    activate_on_provider_change: bool | SkipJsonSchema[None] = Field(
        default=None, description=MEMORY_SETTING_HELP["activate_on_provider_change"]
    )
    shared_budget: bool | SkipJsonSchema[None] = Field(default=None, description=MEMORY_SETTING_HELP["shared_budget"])
    previous_observation_max_tokens: PreviousObservationTokens | SkipJsonSchema[None] = Field(
        default=None, description=MEMORY_SETTING_HELP["previous_observation_max_tokens"]
    )
    temporal_markers: bool | SkipJsonSchema[None] = Field(
        default=None, description=MEMORY_SETTING_HELP["temporal_markers"]
    )
    forward_attachments: bool | SkipJsonSchema[None] = Field(
        default=None, description=MEMORY_SETTING_HELP["forward_attachments"]
    )
    retrieval_scope: RetrievalScope | SkipJsonSchema[None] = Field(
        default=None, description=MEMORY_SETTING_HELP["retrieval_scope"]
    )
    observer_instructions: Guidance | SkipJsonSchema[None] = Field(
        default=None, description=MEMORY_SETTING_HELP["observer_instructions"]
    )
    reflector_instructions: Guidance | SkipJsonSchema[None] = Field(
        default=None, description=MEMORY_SETTING_HELP["reflector_instructions"]
    )


class AutonomySettingsOut(WireModel):
    evolution_enabled: bool
    skill_creation_enabled: bool
    self_update_enabled: bool
    self_update_cron: str
    updated_at: str


class AutonomySettingsPatch(PatchModel):
    evolution_enabled: bool | SkipJsonSchema[None] = None
    skill_creation_enabled: bool | SkipJsonSchema[None] = None
    self_update_enabled: bool | SkipJsonSchema[None] = None
    self_update_cron: Cron | SkipJsonSchema[None] = Field(
        default=None, description="five-field cron expression, server timezone"
    )


class BrowserSettingsOut(WireModel):
    enabled: bool
    # Whether interactive agents may run browser_run_code_unsafe (arbitrary Playwright code).
    allow_code_execution: bool
    updated_at: str


class BrowserSettingsPatch(PatchModel):
    enabled: bool | SkipJsonSchema[None] = None
    allow_code_execution: bool | SkipJsonSchema[None] = None
