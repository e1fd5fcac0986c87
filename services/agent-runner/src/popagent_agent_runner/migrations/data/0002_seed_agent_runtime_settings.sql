-- The agent-runtime singleton, seeded exactly once. After this migration the row is the
-- only source of these values; nothing in code restores them.
INSERT INTO popagent_agent_runtime_settings (
    id, default_model, supervisor_max_steps, specialist_max_steps, max_concurrent_tool_calls,
    max_processor_retries, final_response_feedback, delegation_context_max_chars,
    delegation_result_max_chars, delegation_failure_text, delegation_truncation_text,
    task_concurrency, task_poll_interval_ms, task_heartbeat_interval_ms, task_heartbeat_timeout_ms,
    task_attempt_timeout_ms, task_abort_ack_timeout_ms, task_retry_base_ms, task_retry_cap_ms, updated_at
) VALUES (
    1, 'cx/gpt-5.3-codex', 24, 16, 4,
    3,
    'Your last step used its budget on tools without answering. Reply to the user now with a complete final response built from what you already know. Do not call more tools; state plainly what is still unverified.',
    12000,
    16000,
    'The specialist could not complete this delegation. Continue with your own work, choose another specialist, or tell the user what could not be done and why.',
    '[The specialist response was truncated to the configured delegation result bound.]',
    2, 2000, 5000, 30000,
    1800000, 10000, 5000, 300000, now()
)
ON CONFLICT (id) DO NOTHING;
