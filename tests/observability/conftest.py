"""The observability tests run the chat stack of the chat suite (shared per worker) and the task-turn stack."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

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
