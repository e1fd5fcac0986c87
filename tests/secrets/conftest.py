"""Fixtures for the secrets service: an in-process server on a real socket, real PG and NATS."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from secrets_support import new_key, outbox_drained, secrets_stub

from popagent.secrets.v1 import secrets_pb2_grpc
from popagent_core.settings import load_settings
from popagent_dev.embedded import free_port
from popagent_secrets.service import MIGRATIONS, build
from popagent_secrets.settings import Settings


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


@pytest.fixture(autouse=True)
def _log_everything(caplog: pytest.LogCaptureFixture) -> None:
    """Emit every log record in-process too, so a bad `extra` key or a leak in a message shows."""
    caplog.set_level(logging.DEBUG)


@pytest.fixture
async def secrets_dsn(make_database) -> str:  # type: ignore[no-untyped-def]
    return await make_database({"secrets": MIGRATIONS})


@pytest.fixture
async def secrets_service(
    secrets_dsn: str, nats_url: str, internal_credentials: tuple[dict[str, str], str]
) -> AsyncIterator[SecretsUnderTest]:
    tokens, callers_json = internal_credentials
    settings = service_settings(secrets_dsn, nats_url, callers_json, new_key())
    async with build(settings):
        yield SecretsUnderTest(settings.grpc_address, secrets_dsn, settings, tokens)
        await outbox_drained(secrets_dsn)
