-- A task attempt's answer beside its completed turn (docs/turns.md, "Task turns"). A tasks worker
-- can die after the turn completed and before the task's own transition; the next attempt then
-- takes this answer instead of running the work again.
ALTER TABLE popagent_turns ADD COLUMN task_outcome text;

CREATE INDEX popagent_turns_completed_task ON popagent_turns (task_id)
    WHERE task_id IS NOT NULL AND status = 'completed' AND task_outcome IS NOT NULL;
