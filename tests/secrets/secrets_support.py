"""Helpers shared by the secrets tests (imported by name: pytest puts this folder on sys.path)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import asyncpg

from popagent.secrets.v1 import secrets_pb2, secrets_pb2_grpc
from popagent_core.grpc_client import check_health, open_channel
from popagent_core.settings import load_settings
from popagent_dev.embedded import free_port
from popagent_secrets.settings import Settings
from support.waiting import eventually


def new_key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


class HasStub(Protocol):
    def stub(
        self, caller: str | None
    ) -> contextlib.AbstractAsyncContextManager[secrets_pb2_grpc.SecretsServiceStub]: ...


async def put(
    stub: secrets_pb2_grpc.SecretsServiceStub, resource_id: str, name: str, value: str
) -> secrets_pb2.SecretInfo:
    stored = await stub.PutSecret(secrets_pb2.PutSecretRequest(resource_id=resource_id, name=name, value=value))
    return stored.secret


async def resolve(service: HasStub, resource_id: str, name: str, origin: str) -> str:
    """ResolveSecret as browser-bridge, the only caller allowed plaintext."""
    async with service.stub("browser-bridge") as bridge:
        response = await bridge.ResolveSecret(
            secrets_pb2.ResolveSecretRequest(resource_id=resource_id, name=name, origin=origin)
        )
    return response.value


@contextlib.asynccontextmanager
async def secrets_stub(address: str, token: str) -> AsyncIterator[secrets_pb2_grpc.SecretsServiceStub]:
    async with open_channel(address, token) as channel:
        yield secrets_pb2_grpc.SecretsServiceStub(channel)


def process_env(**values: str) -> dict[str, str]:
    """The test process's environment (the kernel plugin already dropped POPAGENT_*) plus `values`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("POPAGENT_") and k != "DATABASE_URL"}
    env.update(values)
    return env


@contextlib.asynccontextmanager
async def running_process(env: dict[str, str], stderr_path: Path) -> AsyncIterator[asyncio.subprocess.Process]:
    """`python -m popagent_secrets` as a real process; waits for gRPC health; SIGTERM on exit."""
    with stderr_path.open("wb") as stderr:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "popagent_secrets", env=env, stdout=asyncio.subprocess.DEVNULL, stderr=stderr
        )
    try:
        async with open_channel(env["POPAGENT_SECRETS_ADDR"], "") as channel:

            async def healthy() -> bool:
                if await check_health(channel, timeout_s=0.5):
                    return True
                if process.returncode is not None:
                    raise RuntimeError(f"secrets process exited with {process.returncode} before serving")
                return False

            await eventually(healthy, within=30, interval=0.1, what="the secrets process to serve")
        yield process
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(15):
                    await process.wait()
            except TimeoutError:
                process.kill()
                await process.wait()


async def outbox_drained(dsn: str) -> None:
    """Wait until the relay has published every pending event of the secrets schema.

    Stopping an in-process service right after a write can hang on Python 3.11: the
    kernel's OutboxRelay waits with `asyncio.wait_for(wake.wait(), …)`, which swallows a
    cancellation landing together with the NOTIFY wake-up (CPython gh-86296), so its task
    never ends. Stopping with nothing left to relay keeps the two apart.
    """
    conn = await asyncpg.connect(dsn)
    try:
        # At most ~10 s, and not a check: a test may leave events the relay cannot publish.
        with contextlib.suppress(AssertionError):
            await eventually(
                lambda: conn.fetchval("SELECT count(*) FROM secrets.popagent_outbox WHERE published_at IS NULL"),
                until=lambda pending: not pending,
                within=10,
                interval=0.02,
            )
        # Let the relay get back to waiting after the batch it just published.
        await asyncio.sleep(0.1)
    finally:
        await conn.close()


@dataclass
class SecretsUnderTest:
    address: str
    dsn: str
    settings: Settings
    tokens: dict[str, str]

    @contextlib.asynccontextmanager
    async def stub(self, caller: str | None) -> AsyncIterator[secrets_pb2_grpc.SecretsServiceStub]:
        """A stub authenticated as `caller` (None: no credential at all)."""
        async with secrets_stub(self.address, self.tokens[caller] if caller else "") as stub:
            yield stub


def service_settings(dsn: str, nats_url: str, callers_json: str, key: str, previous: str = "") -> Settings:
    env = {
        "DATABASE_URL": dsn,
        "NATS_URL": nats_url,
        "POPAGENT_SECRETS_ADDR": f"127.0.0.1:{free_port()}",
        "POPAGENT_INTERNAL_CALLERS": callers_json,
        "POPAGENT_SECRET_KEY": key,
    }
    if previous:
        env["POPAGENT_SECRET_PREVIOUS_KEYS"] = previous
    return load_settings(Settings, "secrets", **env)
