"""Fixtures of the gateway tests: a scripted agent-runner on real gRPC behind the real gateway app on real HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from .harness import Harness
from .serving import serving_harness


@pytest.fixture
async def harness(internal_credentials: tuple[dict[str, str], str]) -> AsyncIterator[Harness]:
    async with serving_harness(internal_credentials) as served:
        yield served


@pytest.fixture(scope="module")
async def refusing_harness(internal_credentials: tuple[dict[str, str], str]) -> AsyncIterator[Harness]:
    """One harness for a module's tests whose requests the gateway refuses before any call to
    agent-runner (each asserts that none reached it): they leave nothing behind for the next."""
    async with serving_harness(internal_credentials) as served:
        yield served
