-- Approval cards (docs/channels.md, Approvals): the message with Approve / Deny / Allow for this session
-- buttons a channel turn posts when one of its tool calls waits for a person. A press is taken only for
-- an approval that has a card in the same connection, and the card is edited once to its outcome.
CREATE TABLE popagent_channel_approval_cards (
    approval_id text PRIMARY KEY,
    connection_id text NOT NULL REFERENCES popagent_channel_connections (id) ON DELETE CASCADE,
    conversation text NOT NULL,
    thread text NOT NULL DEFAULT '',
    session_id text NOT NULL,
    message_id text NOT NULL DEFAULT '',
    tool_name text NOT NULL DEFAULT '',
    -- '' while the approval waits; the outcome's text once the card shows it.
    outcome text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX popagent_channel_approval_cards_session ON popagent_channel_approval_cards (session_id) WHERE outcome = '';
