-- The daily usage roll-up also sums cost: each priced model call's `popagent.usage.cost_usd` (USD,
-- from the model catalog's prices). NULL for a group none of whose calls was priced.
CREATE OR REPLACE VIEW popagent_usage_daily AS
SELECT
    date_trunc('day', started_at) AS day,
    session_id,
    agent_id,
    coalesce(attributes ->> 'gen_ai.response.model', attributes ->> 'gen_ai.request.model') AS model,
    count(*) AS calls,
    sum(coalesce((attributes ->> 'gen_ai.usage.input_tokens')::bigint, 0)) AS input_tokens,
    sum(coalesce((attributes ->> 'gen_ai.usage.output_tokens')::bigint, 0)) AS output_tokens,
    sum(coalesce((attributes ->> 'gen_ai.usage.cache_read.input_tokens')::bigint, 0)) AS cached_input_tokens,
    sum((attributes ->> 'popagent.usage.cost_usd')::float8) AS cost_usd
FROM popagent_spans
WHERE name = 'model.generation'
GROUP BY 1, 2, 3, 4;
