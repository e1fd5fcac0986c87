"""Fixtures of the evolution loop's tests: the learning stack (support/stacks.py), shared by the
session and reset before every test."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from support.stacks import LEARNING_STACK, Stack, StackSpec


@pytest.fixture
async def stack(started_stack: Callable[[StackSpec], Awaitable[Stack]]) -> Stack:
    learning = await started_stack(LEARNING_STACK)
    learning.reset()
    return learning
