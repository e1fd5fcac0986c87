"""A task without a session runs in a thread of its own, shown on the task and never listed
as a chat session; a task with a session runs in that session's thread."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import asyncpg

from popagent.agent_runner.v1 import agent_runner_pb2 as arpb
from popagent_agent_runner.service import MIGRATIONS
from popagent_core.migrate import migrate
from popagent_dev.pytest_plugin import DatabaseFactory
from support.model_gateway import Turn
from support.stacks import Stack


async def _listed_session_ids(stack: Stack) -> set[str]:
    listed = await stack.state.ListSessions(arpb.ListSessionsRequest())
    return {session.id for session in listed.sessions}


async def test_a_sessionless_task_gets_its_own_thread_which_is_not_a_chat_session(stack: Stack) -> None:
    stack.models.push(Turn.say("Disk usage is at 40%."))
    task_id = await stack.create_task("Report the disk usage")
    task = await stack.wait_task(task_id, "completed", "failed", "dead-letter")

    assert (task.status, task.session_id) == ("completed", "")
    assert task.thread_id == f"task-{task_id}"
    assert task.thread_id not in await _listed_session_ids(stack)
    # The thread is still there to read, from the task's thread id.
    thread = await stack.state.GetSession(arpb.GetSessionRequest(id=task.thread_id))
    assert thread.workspace_id == "popagent"
    history = await stack.running.repo.pool.fetch(
        "SELECT role FROM agent_runner.popagent_thread_messages WHERE thread_id = $1 ORDER BY seq", task.thread_id
    )
    assert [row["role"] for row in history] == ["user", "assistant"]


async def test_a_task_with_a_session_runs_in_that_sessions_thread(stack: Stack) -> None:
    session = await stack.state.CreateSession(arpb.CreateSessionRequest(title="Ops", workspace_id="popagent"))
    stack.models.push(Turn.say("All good."))
    task_id = await stack.create_task("Check the queue", session_id=session.id)
    task = await stack.wait_task(task_id, "completed", "failed", "dead-letter")

    assert (task.status, task.thread_id) == ("completed", session.id)
    assert session.id in await _listed_session_ids(stack)
    assert f"task-{task_id}" not in await _listed_session_ids(stack)


async def test_task_threads_stored_before_the_migration_leave_the_session_list(
    make_database: DatabaseFactory, tmp_path: Path
) -> None:
    before = tmp_path / "migrations"
    shutil.copytree(MIGRATIONS, before, ignore=shutil.ignore_patterns("0102_task_threads.sql"))
    dsn = await make_database()
    await migrate(dsn, "agent_runner", before)
    task_thread, chat = f"task-{uuid.uuid4()}", "task-list-by-hand"
    conn = await asyncpg.connect(dsn, server_settings={"search_path": "agent_runner,public"})
    try:
        for session_id in (task_thread, chat):
            await conn.execute(
                "INSERT INTO popagent_sessions (id, title, workspace_id) VALUES ($1, 't', 'popagent')", session_id
            )
        await migrate(dsn, "agent_runner", MIGRATIONS)
        marked = dict(await conn.fetch("SELECT id, task_id FROM popagent_sessions"))
    finally:
        await conn.close()
    assert marked == {task_thread: task_thread.removeprefix("task-"), chat: None}
