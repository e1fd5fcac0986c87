"""Fixtures of the chat tests: the chat stack (support/stacks.py), shared by the session and
reset before every test."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from support.stacks import CHAT_STACK, Stack, StackSpec


@pytest.fixture
async def stack(started_stack: Callable[[StackSpec], Awaitable[Stack]]) -> Stack:
    chat_stack = await started_stack(CHAT_STACK)
    chat_stack.reset()
    return chat_stack
