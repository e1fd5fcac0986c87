-- What a chat turn does when one is already running on its session (double texting):
-- 'reject' answers 409 with the running turn's id, 'enqueue' waits for it to end.
-- A per-session choice: existing and new sessions start with 'reject'.
ALTER TABLE popagent_sessions
    ADD COLUMN double_texting text NOT NULL DEFAULT 'reject' CHECK (double_texting IN ('reject', 'enqueue'));
