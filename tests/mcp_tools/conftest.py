"""Fixtures of the MCP tool tests: the MCP tools stack (support/stacks.py), shared by the session and
reset before every test, the supervisor's tool approval policy emptied with it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
from chat.helpers import reset_for_chat

from support.stacks import MCP_TOOLS_STACK, Stack, StackSpec


@pytest.fixture
async def stack(started_stack: Callable[[StackSpec], Awaitable[Stack]]) -> Stack:
    return await reset_for_chat(await started_stack(MCP_TOOLS_STACK))
