-- Native channels (docs/channels.md): a connection is one bot on one platform whose conversations are
-- chat sessions in one workspace. Its credentials (bot token, signing secret or public key) are kept in the secrets
-- service (resource `channels`, named by the connection's id); `credentials_set` only says they are.
CREATE TABLE popagent_channel_connections (
    id text PRIMARY KEY,
    name text NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 64),
    platform text NOT NULL CHECK (platform IN ('slack', 'telegram', 'discord')),
    workspace_id text NOT NULL DEFAULT '',
    -- The platform user ids that may talk to the bot; empty: nobody (a connection starts closed).
    allowed_users text[] NOT NULL DEFAULT '{}',
    -- The platform user ids whose button presses answer approvals (a subset of who may talk is not required).
    approvers text[] NOT NULL DEFAULT '{}',
    -- The bot's own user id on the platform: its own messages are ignored.
    bot_user_id text NOT NULL DEFAULT '',
    -- Where the platform's Web API is (a stand-in in tests, a proxy in some deployments); '' the platform's own.
    api_base_url text NOT NULL DEFAULT '' CHECK (length(api_base_url) <= 2000),
    credentials_set boolean NOT NULL DEFAULT false,
    enabled boolean NOT NULL DEFAULT true,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- A platform conversation (channel, chat, DM) and thread of one connection is one session. Two bots in
-- chats that share a platform id are two connections, so they never share a session.
CREATE TABLE popagent_channel_conversations (
    connection_id text NOT NULL REFERENCES popagent_channel_connections (id) ON DELETE CASCADE,
    conversation text NOT NULL,
    thread text NOT NULL DEFAULT '',
    session_id text NOT NULL UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (connection_id, conversation, thread)
);

-- Platform event ids already taken in: a retried or replayed delivery is processed once.
CREATE TABLE popagent_channel_events (
    connection_id text NOT NULL REFERENCES popagent_channel_connections (id) ON DELETE CASCADE,
    event_id text NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (connection_id, event_id)
);
CREATE INDEX popagent_channel_events_received ON popagent_channel_events (received_at);

-- Traffic and errors of a connection, newest first in the history route.
CREATE TABLE popagent_channel_history (
    id bigserial PRIMARY KEY,
    connection_id text NOT NULL REFERENCES popagent_channel_connections (id) ON DELETE CASCADE,
    -- 'in' (a user's message), 'out' (a reply or post), 'error' (what went wrong, for the Channels page).
    direction text NOT NULL CHECK (direction IN ('in', 'out', 'error')),
    conversation text NOT NULL DEFAULT '',
    thread text NOT NULL DEFAULT '',
    platform_user text NOT NULL DEFAULT '',
    session_id text NOT NULL DEFAULT '',
    turn_id text NOT NULL DEFAULT '',
    text text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX popagent_channel_history_connection ON popagent_channel_history (connection_id, id DESC);
CREATE INDEX popagent_channel_history_turn ON popagent_channel_history (connection_id, turn_id) WHERE turn_id <> '';
