"""Fixtures of the chat tests: one real stack per worker, reset before every test."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from chat.stack import ChatStack, start_chat_stack


@pytest.fixture(scope="session")
async def chat_stack(
    pg_dsn: str, internal_credentials: tuple[dict[str, str], str], tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[ChatStack]:
    async with start_chat_stack(pg_dsn, internal_credentials, tmp_path_factory.mktemp("chat-stack")) as stack:
        yield stack


@pytest.fixture
def stack(chat_stack: ChatStack) -> ChatStack:
    chat_stack.reset()
    return chat_stack
