-- Named browser profiles (GET/POST /api/browser/profiles): each keeps its browser state in a
-- directory of its own under POPAGENT_BROWSER_PROFILES_DIR and has a network policy, origins
-- checked by the bridge before and after every browser operation of the session using it.
CREATE TABLE popagent_browser_profiles (
    name text PRIMARY KEY,
    allowed_origins text[] NOT NULL,
    blocked_origins text[] NOT NULL,
    created_at timestamptz NOT NULL
);
-- The profile each chat session uses: one session per profile at a time (the unique key), kept
-- until the session releases it or is deleted.
CREATE TABLE popagent_browser_session_profiles (
    session_id text PRIMARY KEY,
    profile_name text NOT NULL UNIQUE REFERENCES popagent_browser_profiles (name),
    chosen_at timestamptz NOT NULL
);
-- A chat session's recording: a screenshot after each browser operation the agent ran, with the
-- operation and its scrubbed arguments. Bounded per session (count and bytes, oldest dropped);
-- deleted with the chat session.
CREATE TABLE popagent_browser_recording_frames (
    session_id text NOT NULL,
    seq bigint NOT NULL,
    taken_at timestamptz NOT NULL,
    operation text NOT NULL,
    arguments_json text NOT NULL,
    is_error boolean NOT NULL,
    png bytea NOT NULL,
    PRIMARY KEY (session_id, seq)
);
