"""One task-turn stack per test session (per xdist worker), reset before every test."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tasks_turns.stack import TaskTurnStack, start_task_turn_stack


@pytest.fixture(scope="session")
async def task_turn_stack(
    pg_dsn: str, internal_credentials: tuple[dict[str, str], str], tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[TaskTurnStack]:
    path = tmp_path_factory.mktemp("task-turn-stack")
    async with start_task_turn_stack(pg_dsn, internal_credentials, path) as stack:
        yield stack


@pytest.fixture
def stack(task_turn_stack: TaskTurnStack) -> TaskTurnStack:
    task_turn_stack.reset()
    return task_turn_stack
