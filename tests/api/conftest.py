"""Fixtures of the HTTP API tests: the API stack (support/stacks.py), shared by the session,
and a client authenticated with its key."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest

from support.stacks import API_STACK, Stack, StackSpec


@pytest.fixture
async def api_stack(started_stack: Callable[[StackSpec], Awaitable[Stack]]) -> Stack:
    return await started_stack(API_STACK)


@pytest.fixture
async def client(api_stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with api_stack.client() as http:
        yield http
