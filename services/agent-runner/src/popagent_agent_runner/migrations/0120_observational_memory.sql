-- Observational memory (issue 19): each thread message's token count (o200k BPE, counted once),
-- the thread's observation log (every generation kept: a reflection starts a new one), and the
-- per-thread cursor of what the log covers. All of it cascades with the thread, so deleting a
-- session removes its observations; long-term memories (popagent_memories) are not thread data.
ALTER TABLE popagent_thread_messages ADD COLUMN tokens integer CHECK (tokens IS NULL OR tokens >= 0);

CREATE TABLE popagent_observations (
    thread_id text NOT NULL REFERENCES popagent_threads (id) ON DELETE CASCADE,
    seq bigint GENERATED ALWAYS AS IDENTITY,
    -- The log version the entry belongs to; the thread's current one is popagent_observation_state.generation.
    generation integer NOT NULL CHECK (generation >= 0),
    kind text NOT NULL CHECK (kind IN ('observation', 'reflection')),
    content text NOT NULL,
    tokens integer NOT NULL CHECK (tokens >= 0),
    -- The thread messages (seq range) it stands for, and their token count (what it saved).
    first_message_seq bigint NOT NULL,
    last_message_seq bigint NOT NULL,
    message_tokens integer NOT NULL CHECK (message_tokens >= 0),
    -- False: buffered by a background observation, not yet in the context.
    active boolean NOT NULL,
    model text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    activated_at timestamptz,
    PRIMARY KEY (thread_id, seq)
);

CREATE INDEX popagent_observations_log ON popagent_observations (thread_id, generation, seq);

CREATE TABLE popagent_observation_state (
    thread_id text PRIMARY KEY REFERENCES popagent_threads (id) ON DELETE CASCADE,
    generation integer NOT NULL DEFAULT 0 CHECK (generation >= 0),
    -- The last message seq the active log covers (the context starts after it), and the last one
    -- the log covers including buffered entries (a background observation starts after that).
    observed_seq bigint NOT NULL DEFAULT 0,
    buffered_seq bigint NOT NULL DEFAULT 0,
    -- Provider prompt tokens per counted token (the context-window guard's factor).
    calibration double precision NOT NULL DEFAULT 1.0 CHECK (calibration > 0),
    -- The model of the thread's last turn, and when it ended (provider-change and idle activation).
    last_model text,
    last_turn_at timestamptz,
    last_compaction_at timestamptz,
    updated_at timestamptz NOT NULL DEFAULT now(),
    CHECK (buffered_seq >= observed_seq)
);
