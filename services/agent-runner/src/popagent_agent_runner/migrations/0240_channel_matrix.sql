-- Matrix connections (docs/channels.md, Matrix): the bot reads its rooms through the client-server API's
-- /sync long-poll, one agent-runner at a time per connection (a leased claim), resuming from the
-- `since` token the last sync answered so a runner that takes over neither misses nor replays a stretch
-- (replays are deduplicated by event id anyway).
ALTER TABLE popagent_channel_connections DROP CONSTRAINT popagent_channel_connections_platform_check;
ALTER TABLE popagent_channel_connections
    ADD CONSTRAINT popagent_channel_connections_platform_check
    CHECK (platform IN ('slack', 'telegram', 'discord', 'matrix'));

CREATE TABLE popagent_channel_syncs (
    connection_id text PRIMARY KEY REFERENCES popagent_channel_connections (id) ON DELETE CASCADE,
    runner_id text NOT NULL,
    lease_until timestamptz NOT NULL,
    -- The homeserver's next_batch of the last sync taken in; '' before the first.
    since text NOT NULL DEFAULT ''
);

-- A reaction names the event it annotates: the card is found by its message id.
CREATE INDEX popagent_channel_approval_cards_message ON popagent_channel_approval_cards (connection_id, message_id);
