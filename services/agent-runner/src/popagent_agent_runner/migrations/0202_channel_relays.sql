-- A channel turn's reply being relayed (docs/channels.md, Replies): which turn, where its reply goes, the
-- message it streams into, and the agent-runner relaying it under a lease. The relay follows the turn's
-- log, so when its runner dies another takes the row over and goes on editing the same message.
CREATE TABLE popagent_channel_relays (
    turn_id text PRIMARY KEY,
    connection_id text NOT NULL REFERENCES popagent_channel_connections (id) ON DELETE CASCADE,
    conversation text NOT NULL,
    -- The platform thread the session maps (history) and the thread replies are posted in.
    thread text NOT NULL DEFAULT '',
    reply_thread text NOT NULL DEFAULT '',
    session_id text NOT NULL,
    -- The streamed message, once posted; '' before.
    message_id text NOT NULL DEFAULT '',
    runner_id text NOT NULL,
    lease_until timestamptz NOT NULL,
    finished_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX popagent_channel_relays_open ON popagent_channel_relays (lease_until) WHERE finished_at IS NULL;
