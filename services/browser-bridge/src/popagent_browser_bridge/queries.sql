-- name: get_browser_settings
SELECT enabled, allow_code_execution, updated_at FROM popagent_browser_settings WHERE id = 1

-- name: update_browser_settings
UPDATE popagent_browser_settings
SET enabled = coalesce($1, enabled), allow_code_execution = coalesce($2, allow_code_execution), updated_at = now()
WHERE id = 1
RETURNING enabled, allow_code_execution, updated_at

-- name: list_takeovers
SELECT session_id FROM popagent_browser_takeovers ORDER BY taken_at

-- name: hold_takeover
INSERT INTO popagent_browser_takeovers (session_id, taken_at) VALUES ($1, now()) ON CONFLICT (session_id) DO NOTHING

-- name: release_takeover
DELETE FROM popagent_browser_takeovers WHERE session_id = $1

-- name: list_tab_owners
SELECT target_id, session_id FROM popagent_browser_tab_owners

-- name: save_tab_owner
INSERT INTO popagent_browser_tab_owners (target_id, session_id, updated_at) VALUES ($1, $2, now())
ON CONFLICT (target_id) DO UPDATE SET session_id = EXCLUDED.session_id, updated_at = now()

-- name: forget_tab_owners
DELETE FROM popagent_browser_tab_owners WHERE target_id = ANY($1::text[])

-- name: list_profiles
SELECT p.name, p.allowed_origins, p.blocked_origins, p.created_at, s.session_id
FROM popagent_browser_profiles p LEFT JOIN popagent_browser_session_profiles s ON s.profile_name = p.name
ORDER BY p.name

-- name: get_profile
SELECT p.name, p.allowed_origins, p.blocked_origins, p.created_at, s.session_id
FROM popagent_browser_profiles p LEFT JOIN popagent_browser_session_profiles s ON s.profile_name = p.name
WHERE p.name = $1

-- name: create_profile
INSERT INTO popagent_browser_profiles (name, allowed_origins, blocked_origins, created_at)
VALUES ($1, $2, $3, now())
ON CONFLICT (name) DO NOTHING
RETURNING name, allowed_origins, blocked_origins, created_at, NULL::text AS session_id

-- name: update_profile_policy
UPDATE popagent_browser_profiles SET allowed_origins = $2, blocked_origins = $3 WHERE name = $1
RETURNING name, allowed_origins, blocked_origins, created_at,
    (SELECT session_id FROM popagent_browser_session_profiles WHERE profile_name = $1) AS session_id

-- name: delete_unused_profile
DELETE FROM popagent_browser_profiles p
WHERE p.name = $1 AND NOT EXISTS (SELECT 1 FROM popagent_browser_session_profiles s WHERE s.profile_name = p.name)
RETURNING name

-- name: list_session_profiles
SELECT session_id, profile_name FROM popagent_browser_session_profiles

-- name: choose_session_profile
INSERT INTO popagent_browser_session_profiles (session_id, profile_name, chosen_at) VALUES ($1, $2, now())
ON CONFLICT (session_id) DO UPDATE SET profile_name = EXCLUDED.profile_name, chosen_at = now()

-- name: release_session_profile
DELETE FROM popagent_browser_session_profiles WHERE session_id = $1

-- name: add_recording_frame
INSERT INTO popagent_browser_recording_frames (session_id, seq, taken_at, operation, arguments_json, is_error, png)
SELECT $1, coalesce(max(seq), 0) + 1, now(), $2, $3, $4, $5
FROM popagent_browser_recording_frames WHERE session_id = $1

-- name: trim_recording
-- The newest frames within both bounds stay; every older one goes.
DELETE FROM popagent_browser_recording_frames f
USING (
    SELECT seq, row_number() OVER newest AS position, sum(octet_length(png)) OVER newest AS total
    FROM popagent_browser_recording_frames WHERE session_id = $1
    WINDOW newest AS (ORDER BY seq DESC)
) ranked
WHERE f.session_id = $1 AND f.seq = ranked.seq AND (ranked.position > $2 OR ranked.total > $3)

-- name: list_recording_frames
SELECT seq, taken_at, operation, arguments_json, is_error, octet_length(png) AS bytes
FROM popagent_browser_recording_frames WHERE session_id = $1 ORDER BY seq

-- name: get_recording_frame
SELECT png FROM popagent_browser_recording_frames WHERE session_id = $1 AND seq = $2

-- name: delete_recording
DELETE FROM popagent_browser_recording_frames WHERE session_id = $1

-- name: lock_recording
-- One writer per session at a time: two frames never take the same sequence number.
SELECT pg_advisory_xact_lock(hashtext('popagent_browser_recording:' || $1))
