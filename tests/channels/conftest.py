"""Fixtures of the channel tests: the channels stack (support/stacks.py), shared by the module."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
from chat.helpers import reset_for_chat

from support.stacks import CHANNELS_STACK, Stack, StackSpec


@pytest.fixture
async def stack(started_stack: Callable[[StackSpec], Awaitable[Stack]]) -> Stack:
    return await reset_for_chat(await started_stack(CHANNELS_STACK))
