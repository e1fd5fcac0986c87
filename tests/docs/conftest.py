"""Fixtures of the documentation tests: their stack (docs_support.DOCS_STACK), reset before every test."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from docs.docs_support import DOCS_STACK
from support.stacks import Stack, StackSpec


@pytest.fixture
async def stack(started_stack: Callable[[StackSpec], Awaitable[Stack]]) -> Stack:
    docs_stack = await started_stack(DOCS_STACK)
    docs_stack.reset()
    return docs_stack
