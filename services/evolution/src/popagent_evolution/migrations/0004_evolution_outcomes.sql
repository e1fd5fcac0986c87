-- Every agent run's outcome, success or failure, as its event arrived: what a reflection reads as
-- the agent's rate (successes are no signals, but without them a reflection sees only failures).
-- One row per event (the Nats-Msg-Id), so a redelivered event counts once; rows older than the
-- window the worker keeps (OUTCOME_WINDOW_DAYS in signals.py) are deleted.
CREATE TABLE popagent_evolution_outcomes (
    event_id text PRIMARY KEY CHECK (length(event_id) BETWEEN 1 AND 128),
    agent_id text NOT NULL CHECK (agent_id ~ '^[a-z][a-z0-9-]{0,62}$'),
    succeeded boolean NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX popagent_evolution_outcomes_agent ON popagent_evolution_outcomes (agent_id, recorded_at);
CREATE INDEX popagent_evolution_outcomes_age ON popagent_evolution_outcomes (recorded_at);
