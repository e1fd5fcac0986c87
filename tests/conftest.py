"""Root conftest. The dev library's plugin (popagent_dev.pytest_plugin: real PostgreSQL and
NATS) loads through addopts; the canary plugin makes every test fail whose captured output
holds the session's canary secret.

`started_stack` starts a suite's stack of real services (support/stacks.py) the first time a
suite asks for it and keeps it for the test session (per xdist worker).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    # Imported when a stack is first asked for: suites without one do not load every service.
    from support.stacks import Stack, StackSpec

pytest_plugins = ["support.canary", "support.tracing", "support.xdist_groups", "pytester"]


@pytest.fixture(scope="session")
async def started_stack(
    pg_dsn: str, internal_credentials: tuple[dict[str, str], str], tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Callable[[StackSpec], Awaitable[Stack]]]:
    from support.stacks import start_stack

    stacks: dict[str, Stack] = {}
    async with contextlib.AsyncExitStack() as running:

        async def start(spec: StackSpec) -> Stack:
            if spec.name not in stacks:
                base = tmp_path_factory.mktemp(f"{spec.name}-stack")
                stacks[spec.name] = await running.enter_async_context(
                    start_stack(pg_dsn, internal_credentials, base, spec)
                )
            started = stacks[spec.name]
            assert started.spec == spec, f"two different specs are both called {spec.name}"
            return started

        yield start
