-- Usage rolled up per day, session, agent and model, from the model calls' spans (one row each).
CREATE VIEW popagent_usage_daily AS
SELECT
    date_trunc('day', started_at) AS day,
    session_id,
    agent_id,
    coalesce(attributes ->> 'gen_ai.response.model', attributes ->> 'gen_ai.request.model') AS model,
    count(*) AS calls,
    sum(coalesce((attributes ->> 'gen_ai.usage.input_tokens')::bigint, 0)) AS input_tokens,
    sum(coalesce((attributes ->> 'gen_ai.usage.output_tokens')::bigint, 0)) AS output_tokens,
    sum(coalesce((attributes ->> 'gen_ai.usage.cache_read.input_tokens')::bigint, 0)) AS cached_input_tokens
FROM popagent_spans
WHERE name = 'model.generation'
GROUP BY 1, 2, 3, 4;
