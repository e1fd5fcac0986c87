"""Fixtures for the secrets service: an in-process server on a real socket, real PG and NATS."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import pytest
from secrets_support import SecretsUnderTest, new_key, outbox_drained, service_settings

from popagent_secrets.service import MIGRATIONS, build


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
