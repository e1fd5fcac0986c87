"""Fixtures of the task-turn tests: the task-turn stack (support/stacks.py), shared by the
session and reset before every test."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from support.stacks import TASK_TURN_STACK, Stack, StackSpec


@pytest.fixture
async def stack(started_stack: Callable[[StackSpec], Awaitable[Stack]]) -> Stack:
    task_turn_stack = await started_stack(TASK_TURN_STACK)
    task_turn_stack.reset()
    return task_turn_stack
