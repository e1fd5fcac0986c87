"""Fixtures of the observational-memory tests: the chat stack (its database, and one real-stack
test through HTTP) and an in-process conversation harness (harness.py) on a scripted model server
of its own, so a 300-turn conversation stays CI-sized."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import asyncpg
import pytest

from memory.harness import OTHER_MODEL, SMALL_MODEL, Conversations
from support.model_gateway import ModelGateway, ModelInfo
from support.stacks import CHAT_STACK, MODEL, Stack, StackSpec


@pytest.fixture
async def stack(started_stack: Callable[[StackSpec], Awaitable[Stack]]) -> Stack:
    chat_stack = await started_stack(CHAT_STACK)
    chat_stack.reset()
    return chat_stack


@pytest.fixture
async def conversations(stack: Stack) -> AsyncIterator[Conversations]:
    pool = await asyncpg.create_pool(stack.dsn, min_size=1, max_size=4, server_settings={"search_path": "agent_runner"})
    assert pool is not None
    models = (
        ModelInfo(MODEL, context_length=128_000),
        ModelInfo(OTHER_MODEL, context_length=128_000),
        ModelInfo(SMALL_MODEL, context_length=6_000),
    )
    try:
        async with (
            ModelGateway(models=models, api_key="sk-memory") as gateway,
            Conversations.open(pool, gateway, "sk-memory") as harness,
        ):
            yield harness
    finally:
        await pool.close()
