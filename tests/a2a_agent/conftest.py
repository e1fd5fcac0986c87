"""Fixtures of the A2A agent tests: the MCP stack (support/stacks.py: the gateway, agent-runner, the
tasks service and the scripted model, which is all the A2A agent calls), shared by the session and
reset before every test."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from support.stacks import MCP_STACK, Stack, StackSpec


@pytest.fixture
async def stack(started_stack: Callable[[StackSpec], Awaitable[Stack]]) -> Stack:
    a2a_stack = await started_stack(MCP_STACK)
    a2a_stack.reset()
    return a2a_stack
