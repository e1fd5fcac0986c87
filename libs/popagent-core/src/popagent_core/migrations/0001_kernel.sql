-- Kernel tables present in every service schema.

-- Versioned data migrations (singleton seeds): a marker here means "never again",
-- even if the seeded row is later edited or removed.
CREATE TABLE popagent_data_migrations (
    scope text NOT NULL,
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, name)
);

-- Transactional outbox: written in the same transaction as the state change it
-- reports, relayed to JetStream with Nats-Msg-Id = id, then marked published.
CREATE TABLE popagent_outbox (
    id uuid PRIMARY KEY,
    -- Enqueue order: created_at is the transaction's start time, equal for every row of
    -- one transaction, and ids are random.
    seq bigint GENERATED ALWAYS AS IDENTITY,
    subject text NOT NULL,
    payload bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    published_at timestamptz,
    attempts integer NOT NULL DEFAULT 0
);

CREATE INDEX popagent_outbox_pending ON popagent_outbox (seq) WHERE published_at IS NULL;
