"""Fixtures of the MCP server tests: the MCP stack (support/stacks.py), shared by the session and
reset before every test."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from support.stacks import MCP_STACK, Stack, StackSpec


@pytest.fixture
async def stack(started_stack: Callable[[StackSpec], Awaitable[Stack]]) -> Stack:
    mcp_stack = await started_stack(MCP_STACK)
    mcp_stack.reset()
    return mcp_stack
