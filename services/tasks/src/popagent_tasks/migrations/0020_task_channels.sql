-- Where a task's result is posted when it ends (docs/channels.md, Task results): a channel connection of
-- agent-runner's, one of its conversations and optionally a thread. Written with the task, read by the
-- channel observer; a connection deleted later makes the post fail (logged), never the task.
CREATE TABLE popagent_task_channels (
    task_id uuid PRIMARY KEY REFERENCES popagent_agent_tasks (id) ON DELETE CASCADE,
    connection_id text NOT NULL CHECK (length(connection_id) BETWEEN 1 AND 200),
    conversation text NOT NULL CHECK (length(conversation) BETWEEN 1 AND 200),
    thread text NOT NULL DEFAULT '' CHECK (length(thread) <= 200)
);
