-- Taking over a turn whose runner died (docs/turns.md, Takeover). Every chat turn keeps what it
-- runs (`request`, as queued turns do) and, once it calls tools, its progress: its model responses
-- and tool results so far (pydantic-ai messages) and its assistant UI message so far, written
-- before a step's tool calls run (they are then in flight) and after their results. Another runner
-- goes on from there: from its prompt when there is no progress, else from its last stored step,
-- with calls that were in flight reported to the model as interrupted, never run again unasked.
ALTER TABLE popagent_turns ADD COLUMN progress jsonb;
ALTER TABLE popagent_turns ADD COLUMN attempts integer NOT NULL DEFAULT 1;
