"""NATS killed under a connected client (issue 22, finding 4): one warning and reminders at
doubling intervals instead of a traceback per reconnect attempt, one line when it is back.
Runs on a NATS of its own (never the suite's shared broker)."""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path

import pytest

from popagent_core import bus
from popagent_dev import embedded
from support.waiting import eventually


async def test_a_killed_broker_is_one_warning_not_a_traceback_storm(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    broker = embedded.start_nats(tmp_path / "nats")
    port = int(broker.url.rsplit(":", 1)[1])
    try:
        async with bus.connect(broker.url, name="outage-test") as nc:
            with caplog.at_level(logging.DEBUG):
                broker.process.send_signal(signal.SIGKILL)
                broker.process.wait(5)
                await eventually(lambda: not nc.is_connected, within=5, what="the client to notice")
                await asyncio.sleep(3)
                down = [r for r in caplog.records if r.levelno >= logging.WARNING]
                # nats-py alone logged a traceback per reconnect attempt here (2 a second).
                assert [r.getMessage() for r in down] == ["NATS connection lost; reconnecting"]
                assert not [r for r in caplog.records if r.exc_info]
                broker = embedded.start_nats(tmp_path / "nats", port=port)
                await eventually(lambda: nc.is_connected, within=10, what="the client to reconnect")
                await eventually(
                    lambda: any(r.getMessage() == "NATS connection restored" for r in caplog.records),
                    what="the restored line",
                )
            await nc.publish("popagent.test.outage.checked", b"ok")
            await nc.flush(timeout=5)
    finally:
        broker.stop()


def test_health_reports_nats_and_names_the_server_when_it_is_down(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from popagent_gateway.app import create_app
    from popagent_gateway.settings import Settings

    broker = embedded.start_nats(tmp_path / "nats")
    values: dict[str, object] = {
        "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
        "OBSERVABILITY_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
        "POPAGENT_API_KEY": "k" * 32,
        "POPAGENT_UI_DIR": "/nonexistent/popagent-ui",
        "NATS_URL": broker.url,
    }
    settings = Settings(**values)  # type: ignore[arg-type]
    try:
        with TestClient(create_app(settings)) as client:
            headers = {"x-popagent-key": "k" * 32}
            assert client.get("/api/health", headers=headers).json()["components"]["nats"] == {"ok": True, "detail": ""}
            broker.stop()
            nats = client.get("/api/health", headers=headers).json()["components"]["nats"]
            assert nats["ok"] is False and "ConnectionRefusedError" in nats["detail"]
    finally:
        broker.stop()
