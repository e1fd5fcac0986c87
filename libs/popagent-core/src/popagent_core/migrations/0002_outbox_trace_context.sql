-- The trace context (W3C traceparent/tracestate as JSON) of the transaction that wrote the
-- event, sent as the relayed message's headers so consumers continue that trace.
ALTER TABLE popagent_outbox ADD COLUMN trace_context jsonb;
