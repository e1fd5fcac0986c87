-- Where a schedule's runs post their results (docs/channels.md, Task results): each task a schedule
-- creates gets this row's channel in popagent_task_channels, in the same transaction.
CREATE TABLE popagent_schedule_channels (
    schedule_id uuid PRIMARY KEY REFERENCES popagent_agent_schedules (id) ON DELETE CASCADE,
    connection_id text NOT NULL CHECK (length(connection_id) BETWEEN 1 AND 200),
    conversation text NOT NULL CHECK (length(conversation) BETWEEN 1 AND 200),
    thread text NOT NULL DEFAULT '' CHECK (length(thread) <= 200)
);
