"""Helpers shared by the secrets tests (imported by name: pytest puts this folder on sys.path)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Protocol

import asyncpg

from popagent.secrets.v1 import secrets_pb2, secrets_pb2_grpc
from popagent_core.grpc_client import check_health, open_channel


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
            async with asyncio.timeout(30):
                while not await check_health(channel, timeout_s=0.5):
                    if process.returncode is not None:
                        raise RuntimeError(f"secrets process exited with {process.returncode} before serving")
                    await asyncio.sleep(0.1)
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
        for _ in range(500):  # at most ~10 s
            pending = await conn.fetchval("SELECT count(*) FROM secrets.popagent_outbox WHERE published_at IS NULL")
            if not pending:
                break
            await asyncio.sleep(0.02)
        # Let the relay get back to waiting after the batch it just published.
        await asyncio.sleep(0.1)
    finally:
        await conn.close()
