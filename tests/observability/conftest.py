"""The observability tests run the chat stack of the chat suite (shared per worker) and the task-turn stack."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import asyncpg
import pytest

from popagent_dev.embedded import with_database
from support.stacks import CHAT_STACK, TASK_TURN_STACK, Stack, StackSpec


@pytest.fixture
async def chat_stack(started_stack: Callable[[StackSpec], Awaitable[Stack]]) -> Stack:
    stack = await started_stack(CHAT_STACK)
    stack.reset()
    return stack


@pytest.fixture
async def task_stack(started_stack: Callable[[StackSpec], Awaitable[Stack]]) -> Stack:
    stack = await started_stack(TASK_TURN_STACK)
    stack.reset()
    return stack


@pytest.fixture
async def store(pg_dsn: str) -> AsyncIterator[str]:
    name = f"popagent_obs_retain_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(pg_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield with_database(pg_dsn, name)
        finally:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()
