-- The observational-memory singleton, seeded exactly once (thread-scoped observation,
-- async buffering on, shared budgets off because they disable async buffering).
INSERT INTO popagent_memory_settings (
    id, enabled, observation_message_tokens, reflection_observation_tokens, raw_history_retention_messages,
    async_observation_enabled, observation_buffer_activation, observation_block_after,
    async_reflection_enabled, reflection_buffer_activation, reflection_block_after,
    idle_activation_seconds, activate_on_provider_change, shared_budget, previous_observation_max_tokens,
    temporal_markers, forward_attachments, retrieval_scope, observer_instructions, reflector_instructions,
    updated_at
) VALUES (
    1, true, 30000, 40000, 20,
    true, 0.2, 1.2,
    true, 0.5, 1.2,
    0, true, false, 2000,
    true, false, 'thread', '', '',
    now()
)
ON CONFLICT (id) DO NOTHING;
