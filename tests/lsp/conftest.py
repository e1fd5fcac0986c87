"""Fixtures of the language-server tests: one fixture repository and one set of servers per module.

The servers are real (basedpyright, typescript-language-server with typescript 6); one
`LanguageServers` is shared by a module's tests, so each server starts once per module.
The chat turn runs on the chat suite's stack (support/stacks.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from lsp import fixture_repo
from popagent_agent_runner.lsp.inspection import Inspector
from popagent_agent_runner.lsp.manager import LanguageServers
from popagent_agent_runner.workspace.paths import Repository
from support.stacks import CHAT_STACK, Stack, StackSpec


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Repository:
    root = fixture_repo.write(tmp_path_factory.mktemp("lsp-repo")).resolve()
    return Repository(root, fixture_repo.WORKSPACE)


@pytest.fixture(scope="module")
async def servers() -> AsyncIterator[LanguageServers]:
    running = LanguageServers(request_timeout_s=45.0)
    try:
        yield running
    finally:
        await running.close()


@pytest.fixture
def inspector(servers: LanguageServers, repo: Repository) -> Inspector:
    return Inspector(servers, fixture_repo.WORKSPACE, repo)


@pytest.fixture
async def stack(started_stack: Callable[[StackSpec], Awaitable[Stack]]) -> Stack:
    """The chat stack (shared with the chat suite), reset for the test."""
    chat_stack = await started_stack(CHAT_STACK)
    chat_stack.reset()
    return chat_stack
