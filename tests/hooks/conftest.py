"""Fixtures for the hooks contract tests: a real HTTPS receiver, real transport, real service."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from popagent_core.embedded import free_port
from popagent_core.grpc_client import open_channel
from popagent_hooks.config import HooksConfig, parse_hooks_config
from popagent_hooks.dispatcher import Dispatcher
from popagent_hooks.service import MIGRATIONS, RunningHooks, build
from popagent_hooks.settings import Settings
from popagent_hooks.transport import HookTransport
from support.https_receiver import HttpsReceiver, make_secret

ALLOWED = "127.0.0.1,localhost,hooks.test"


def handler(handler_id: str, url: str, **fields: Any) -> dict[str, Any]:
    """One handler entry with a fresh signing secret unless given."""
    return {"id": handler_id, "type": "http", "url": url, "secret": fields.pop("secret", make_secret()), **fields}


def document(**events: list[dict[str, Any]]) -> str:
    return json.dumps({"version": 1, "hooks": events})


def config_of(**events: list[dict[str, Any]]) -> HooksConfig:
    return parse_hooks_config(document(**events), frozenset(ALLOWED.split(",")))


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


def service_env(
    dsn: str, nats_url: str, callers: str, receiver: HttpsReceiver | None, hooks: str | None, **extra: str
) -> dict[str, str]:
    env = {
        "DATABASE_URL": dsn,
        "NATS_URL": nats_url,
        "POPAGENT_INTERNAL_CALLERS": callers,
        "POPAGENT_HOOKS_ADDR": f"127.0.0.1:{free_port()}",
        "POPAGENT_HOOK_ALLOWED_HOSTS": ALLOWED,
        "POPAGENT_HOOK_ALLOW_PRIVATE_ADDRESSES": "true",
        **extra,
    }
    if receiver is not None:
        env["POPAGENT_HOOK_CA_FILE"] = str(receiver.ca_file)
    if hooks is not None:
        env["POPAGENT_HOOKS"] = hooks
    return env


@contextlib.asynccontextmanager
async def running_service(env: dict[str, str], token: str) -> AsyncIterator[tuple[RunningHooks, Any]]:
    """The hooks service built in-process (real gRPC server on a free port) and a channel to it."""
    settings = Settings(**env)  # type: ignore[arg-type]
    async with build(settings) as running, open_channel(f"127.0.0.1:{running.port}", token) as channel:
        yield running, channel


HOOKS_MIGRATIONS = {"hooks": MIGRATIONS}
