-- A background task without a session runs in a thread of its own. It keeps a row here
-- (the turn runs in a session) but names its task, and is never listed as a chat session.
ALTER TABLE popagent_sessions ADD COLUMN task_id text;

-- Task threads created before this column existed: the tasks service named them
-- `task-<task uuid>`, an id no chat client generates.
UPDATE popagent_sessions SET task_id = substr(id, 6)
WHERE id ~ '^task-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$';
