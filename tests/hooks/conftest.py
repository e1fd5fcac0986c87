"""Fixtures for the hooks contract tests: a real HTTPS receiver and the real transport."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from hooks.helpers import config_of

from popagent_hooks.dispatcher import Dispatcher
from popagent_hooks.transport import HookTransport
from support.https_receiver import HttpsReceiver


@pytest.fixture
async def receiver(tmp_path: Path) -> AsyncIterator[HttpsReceiver]:
    async with HttpsReceiver(tmp_path) as running:
        yield running


@pytest.fixture
async def transport(receiver: HttpsReceiver) -> AsyncIterator[HookTransport]:
    hook_transport = HookTransport(allow_private=True, ca_file=receiver.ca_file)
    yield hook_transport
    await hook_transport.aclose()


@pytest.fixture
def dispatcher_for(transport: HookTransport) -> Callable[..., Dispatcher]:
    """`dispatcher_for(PreToolUse=[handler(...), ...])` -> a Dispatcher over the real transport."""

    def make(**events: list[dict[str, Any]]) -> Dispatcher:
        return Dispatcher(config_of(**events), transport)

    return make
