-- Settings singletons (spec: popagent_agent_runtime_settings, popagent_memory_settings).
-- Each row is seeded exactly once by a data migration; configurable columns have no
-- defaults, so a missing row is a configuration error and never a reason to restore
-- code defaults. Ranges and cross-field rules are checked by the service on every
-- update (popagent_agent_runner.settings_rules), the CHECKs here are the last line.
CREATE TABLE popagent_agent_runtime_settings (
    id smallint PRIMARY KEY CHECK (id = 1),
    default_model text NOT NULL CHECK (length(default_model) BETWEEN 1 AND 200),
    supervisor_max_steps integer NOT NULL CHECK (supervisor_max_steps >= 2),
    specialist_max_steps integer NOT NULL CHECK (specialist_max_steps >= 1),
    max_concurrent_tool_calls integer NOT NULL CHECK (max_concurrent_tool_calls >= 1),
    max_processor_retries integer NOT NULL CHECK (max_processor_retries >= 0),
    final_response_feedback text NOT NULL,
    delegation_context_max_chars integer NOT NULL CHECK (delegation_context_max_chars >= 0),
    delegation_result_max_chars integer NOT NULL CHECK (delegation_result_max_chars >= 1),
    delegation_failure_text text NOT NULL,
    delegation_truncation_text text NOT NULL,
    task_concurrency integer NOT NULL CHECK (task_concurrency >= 1),
    task_poll_interval_ms integer NOT NULL CHECK (task_poll_interval_ms >= 1),
    task_heartbeat_interval_ms integer NOT NULL CHECK (task_heartbeat_interval_ms >= 1),
    task_heartbeat_timeout_ms integer NOT NULL CHECK (task_heartbeat_timeout_ms > task_heartbeat_interval_ms),
    task_attempt_timeout_ms integer NOT NULL CHECK (task_attempt_timeout_ms >= 1),
    task_abort_ack_timeout_ms integer NOT NULL CHECK (task_abort_ack_timeout_ms >= 1),
    task_retry_base_ms integer NOT NULL CHECK (task_retry_base_ms >= 1),
    task_retry_cap_ms integer NOT NULL CHECK (task_retry_cap_ms >= task_retry_base_ms),
    updated_at timestamptz NOT NULL
);

CREATE TABLE popagent_memory_settings (
    id smallint PRIMARY KEY CHECK (id = 1),
    enabled boolean NOT NULL,
    observation_message_tokens integer NOT NULL CHECK (observation_message_tokens >= 1),
    reflection_observation_tokens integer NOT NULL CHECK (reflection_observation_tokens >= 1),
    raw_history_retention_messages integer NOT NULL CHECK (raw_history_retention_messages >= 0),
    async_observation_enabled boolean NOT NULL,
    observation_buffer_activation double precision NOT NULL,
    observation_block_after double precision NOT NULL,
    async_reflection_enabled boolean NOT NULL,
    reflection_buffer_activation double precision NOT NULL,
    reflection_block_after double precision NOT NULL,
    idle_activation_seconds integer NOT NULL CHECK (idle_activation_seconds >= 0),
    activate_on_provider_change boolean NOT NULL,
    shared_budget boolean NOT NULL,
    previous_observation_max_tokens integer NOT NULL CHECK (previous_observation_max_tokens >= 0),
    temporal_markers boolean NOT NULL,
    forward_attachments boolean NOT NULL,
    retrieval_scope text NOT NULL CHECK (retrieval_scope IN ('thread', 'resource')),
    observer_instructions text NOT NULL,
    reflector_instructions text NOT NULL,
    updated_at timestamptz NOT NULL,
    -- Shared budgets disable async buffering (the Mastra rule the spec keeps).
    CHECK (NOT shared_budget OR NOT (async_observation_enabled OR async_reflection_enabled))
);
