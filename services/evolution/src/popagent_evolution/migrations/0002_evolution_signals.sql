-- Evidence the evolution loop learns from (spec: popagent_evolution_signals): one row per
-- trace, agent and failure class, however often the outcome event is delivered. Goal and
-- evidence are bounded and secret-redacted before they are stored.
--
-- Life of a signal: pending -> claimed (a worker's attempt; `attempts` is its fencing token)
-- -> applied (a revision cites it) | dismissed (reflection chose no strategy for it) |
-- ignored (a user, or a disabled policy) | pending again with a later due_at (a failed
-- attempt, capped exponential backoff) | dead_letter (attempts exhausted; a user may retry).
CREATE TABLE popagent_evolution_signals (
    id uuid PRIMARY KEY,
    -- The Nats-Msg-Id of the first event that produced it.
    event_id text NOT NULL CHECK (length(event_id) BETWEEN 1 AND 128),
    trace_id text NOT NULL CHECK (trace_id ~ '^[0-9a-f]{32}$'),
    turn_id text NOT NULL CHECK (length(turn_id) BETWEEN 1 AND 128),
    session_id text NOT NULL CHECK (length(session_id) <= 128),
    agent_id text NOT NULL CHECK (agent_id ~ '^[a-z][a-z0-9-]{0,62}$'),
    failure_class text NOT NULL CHECK (failure_class ~ '^[a-z_]{1,64}$'),
    goal text NOT NULL CHECK (length(goal) <= 500),
    evidence text NOT NULL CHECK (length(evidence) <= 2000),
    status text NOT NULL CHECK (status IN ('pending', 'claimed', 'applied', 'dismissed', 'ignored', 'dead_letter')),
    attempts integer NOT NULL CHECK (attempts >= 0),
    max_attempts integer NOT NULL CHECK (max_attempts >= 1),
    due_at timestamptz NOT NULL,
    claimed_at timestamptz,
    claimed_by text,
    last_error text NOT NULL CHECK (length(last_error) <= 1000),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (trace_id, agent_id, failure_class),
    CHECK ((status = 'claimed') = (claimed_at IS NOT NULL))
);

CREATE INDEX popagent_evolution_signals_due ON popagent_evolution_signals (due_at, id) WHERE status = 'pending';
CREATE INDEX popagent_evolution_signals_claimed ON popagent_evolution_signals (claimed_at) WHERE status = 'claimed';
CREATE INDEX popagent_evolution_signals_recent ON popagent_evolution_signals (created_at DESC, id);
