-- name: list_connections
SELECT id, name, platform, workspace_id, allowed_users, approvers, bot_user_id, api_base_url,
       credentials_set, enabled, created_at, updated_at
FROM popagent_channel_connections ORDER BY name

-- name: get_connection
SELECT id, name, platform, workspace_id, allowed_users, approvers, bot_user_id, api_base_url,
       credentials_set, enabled, created_at, updated_at
FROM popagent_channel_connections WHERE id = $1

-- name: lock_connection
SELECT id FROM popagent_channel_connections WHERE id = $1 FOR UPDATE

-- name: insert_connection
INSERT INTO popagent_channel_connections
    (id, name, platform, workspace_id, allowed_users, approvers, bot_user_id, api_base_url,
     credentials_set, enabled)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)

-- name: update_connection
UPDATE popagent_channel_connections
SET name = $2, platform = $3, workspace_id = $4, allowed_users = $5, approvers = $6,
    bot_user_id = $7, api_base_url = $8, credentials_set = $9, enabled = $10, updated_at = now()
WHERE id = $1

-- name: delete_connection
DELETE FROM popagent_channel_connections WHERE id = $1 RETURNING credentials_set

-- name: seen_event
-- A platform event id taken in once: the insert answers a row the first time only.
INSERT INTO popagent_channel_events (connection_id, event_id) VALUES ($1, $2)
ON CONFLICT DO NOTHING RETURNING event_id

-- name: forget_old_events
DELETE FROM popagent_channel_events WHERE received_at < now() - make_interval(secs => $1)

-- name: thread_lock
-- One arrival at a time per platform thread, whichever agent-runner took it in (held by the caller's
-- connection until it unlocks): the thread's messages reach the session's turns in the order they came.
SELECT pg_advisory_lock(hashtextextended('popagent-channel-thread:' || $1 || ':' || $2 || ':' || $3, 0))

-- name: thread_unlock
SELECT pg_advisory_unlock(hashtextextended('popagent-channel-thread:' || $1 || ':' || $2 || ':' || $3, 0))

-- name: find_conversation
SELECT session_id FROM popagent_channel_conversations
WHERE connection_id = $1 AND conversation = $2 AND thread = $3

-- name: insert_conversation
INSERT INTO popagent_channel_conversations (connection_id, conversation, thread, session_id)
VALUES ($1, $2, $3, $4)
ON CONFLICT DO NOTHING RETURNING session_id

-- name: conversation_of_session
SELECT connection_id, conversation, thread FROM popagent_channel_conversations WHERE session_id = $1

-- name: add_history
INSERT INTO popagent_channel_history
    (connection_id, direction, conversation, thread, platform_user, session_id, turn_id, text)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)

-- name: list_history
SELECT id, direction, conversation, thread, platform_user, session_id, turn_id, text, created_at
FROM popagent_channel_history
WHERE connection_id = $1
ORDER BY id DESC
LIMIT $2

-- name: session_of_turn
SELECT session_id FROM popagent_channel_history
WHERE connection_id = $1 AND turn_id = $2 AND session_id <> ''
LIMIT 1

-- name: starter_of_turn
-- Who sent the message that started the turn (its "turn started" entry names them).
SELECT platform_user FROM popagent_channel_history
WHERE connection_id = $1 AND turn_id = $2 AND platform_user <> ''
ORDER BY id LIMIT 1

-- name: add_card
INSERT INTO popagent_channel_approval_cards
    (approval_id, connection_id, conversation, thread, session_id, message_id, tool_name)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (approval_id) DO NOTHING RETURNING approval_id

-- name: set_card_message
UPDATE popagent_channel_approval_cards SET message_id = $2 WHERE approval_id = $1

-- name: get_card
SELECT approval_id, connection_id, conversation, thread, session_id, message_id, tool_name, outcome
FROM popagent_channel_approval_cards WHERE approval_id = $1 AND connection_id = $2

-- name: settle_card
-- The card's outcome is written once: whoever settles it first edits the message.
UPDATE popagent_channel_approval_cards SET outcome = $2 WHERE approval_id = $1 AND outcome = ''
RETURNING approval_id, connection_id, conversation, thread, session_id, message_id, tool_name, outcome

-- name: open_cards_of_session
SELECT approval_id, connection_id, conversation, thread, session_id, message_id, tool_name, outcome
FROM popagent_channel_approval_cards WHERE session_id = $1 AND outcome = '' ORDER BY created_at DESC

-- name: add_relay
INSERT INTO popagent_channel_relays
    (turn_id, connection_id, conversation, thread, reply_thread, session_id, runner_id, lease_until)
VALUES ($1, $2, $3, $4, $5, $6, $7, now() + make_interval(secs => $8))
ON CONFLICT (turn_id) DO NOTHING

-- name: relay_posted
UPDATE popagent_channel_relays SET message_id = $2 WHERE turn_id = $1

-- name: renew_relays
UPDATE popagent_channel_relays SET lease_until = now() + make_interval(secs => $2)
WHERE runner_id = $1 AND turn_id = ANY($3::text[]) AND finished_at IS NULL

-- name: take_over_relays
-- Open relays whose runner's lease passed (it died or was cut off): this runner goes on with them.
UPDATE popagent_channel_relays r SET runner_id = $1, lease_until = now() + make_interval(secs => $2)
FROM (
    SELECT turn_id FROM popagent_channel_relays
    WHERE finished_at IS NULL AND lease_until < now()
    ORDER BY lease_until LIMIT $3 FOR UPDATE SKIP LOCKED
) lost
WHERE r.turn_id = lost.turn_id
RETURNING r.turn_id, r.connection_id, r.conversation, r.thread, r.reply_thread, r.session_id, r.message_id

-- name: finish_relay
UPDATE popagent_channel_relays SET finished_at = now()
WHERE turn_id = $1 AND runner_id = $2 AND finished_at IS NULL
RETURNING turn_id

-- name: forget_old_relays
DELETE FROM popagent_channel_relays WHERE finished_at < now() - make_interval(secs => $1)

-- name: card_by_message
SELECT approval_id, connection_id, conversation, thread, session_id, message_id, tool_name, outcome
FROM popagent_channel_approval_cards WHERE connection_id = $1 AND message_id = $2 AND message_id <> ''

-- name: claim_sync
-- The connection's sync loop for this runner: taken when nobody holds it or its holder's lease passed,
-- renewed by its holder; answers the `since` token to resume from (no row: someone else holds it).
INSERT INTO popagent_channel_syncs (connection_id, runner_id, lease_until)
VALUES ($1, $2, now() + make_interval(secs => $3))
ON CONFLICT (connection_id) DO UPDATE
SET runner_id = EXCLUDED.runner_id, lease_until = EXCLUDED.lease_until
WHERE popagent_channel_syncs.runner_id = EXCLUDED.runner_id OR popagent_channel_syncs.lease_until < now()
RETURNING since

-- name: synced
UPDATE popagent_channel_syncs SET since = $3, lease_until = now() + make_interval(secs => $4)
WHERE connection_id = $1 AND runner_id = $2
RETURNING connection_id

-- name: release_sync
UPDATE popagent_channel_syncs SET lease_until = now() WHERE connection_id = $1 AND runner_id = $2
