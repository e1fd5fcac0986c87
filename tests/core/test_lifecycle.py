"""A real service process: becomes healthy, stops cleanly on SIGTERM/SIGINT, fails loudly at start."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from popagent_core.grpc_client import check_health, open_channel
from popagent_core.lifecycle import wait_event
from popagent_dev.embedded import free_port, with_database
from support.waiting import START_WITHIN_S, TEST_WITH_A_START_S, eventually, exited

from .helpers import REPO_ROOT, service_env


async def start_evolution(env: dict[str, str], log: Path) -> asyncio.subprocess.Process:
    with log.open("wb") as output:
        return await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "popagent_evolution",
            env=service_env(**env),
            cwd=REPO_ROOT,
            stdout=subprocess.DEVNULL,
            stderr=output,
        )


async def wait_healthy(address: str, process: asyncio.subprocess.Process, timeout_s: float = START_WITHIN_S) -> None:
    """Until the process answers its health check: start-up (imports, migrations) is not what a
    lifecycle bar measures, and on a loaded machine it takes far longer than on an idle one."""
    async with open_channel(address, token="") as channel:

        async def healthy() -> bool:
            assert process.returncode is None, f"service exited with {process.returncode} before becoming healthy"
            return await check_health(channel, timeout_s=0.5)

        await eventually(healthy, within=timeout_s, interval=0.1, what="the service to become healthy")


def log_lines(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


@pytest.mark.timeout(TEST_WITH_A_START_S)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_a_service_process_becomes_healthy_and_exits_0_within_5s_on_signal(
    sig, make_database, nats_url, internal_credentials, tmp_path
):
    _, callers = internal_credentials
    # An empty database: the process migrates its own schema at start.
    dsn = await make_database()
    address = f"127.0.0.1:{free_port()}"
    log = tmp_path / "evolution.log"
    process = await start_evolution(
        {
            "DATABASE_URL": dsn,
            "NATS_URL": nats_url,
            "POPAGENT_EVOLUTION_ADDR": address,
            "POPAGENT_INTERNAL_CALLERS": callers,
        },
        log,
    )
    try:
        await wait_healthy(address, process)

        # The bar: the exit within 5 s of the signal, once the service is up.
        process.send_signal(sig)
        returncode = await asyncio.wait_for(process.wait(), timeout=5)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()

    assert returncode == 0, log.read_text()
    messages = [entry["msg"] for entry in log_lines(log)]
    assert messages[-2:] == ["stopping", "stopped"]
    assert not [entry for entry in log_lines(log) if entry["level"] == "error"]
    async with open_channel(address, token="") as channel:
        assert not await check_health(channel, timeout_s=0.5)


@pytest.mark.timeout(TEST_WITH_A_START_S)
async def test_a_start_up_failure_exits_1_with_the_error_logged(pg_dsn, nats_url, internal_credentials, tmp_path):
    _, callers = internal_credentials
    log = tmp_path / "evolution.log"
    process = await start_evolution(
        {
            "DATABASE_URL": with_database(pg_dsn, "popagent_no_such_database"),
            "NATS_URL": nats_url,
            "POPAGENT_EVOLUTION_ADDR": f"127.0.0.1:{free_port()}",
            "POPAGENT_INTERNAL_CALLERS": callers,
        },
        log,
    )

    await exited(process, what="popagent_evolution with no database")

    assert process.returncode == 1
    [entry] = log_lines(log)
    assert entry["level"] == "error" and entry["msg"] == "service failed"
    assert "popagent_no_such_database" in entry["exc"]


def test_settling_the_heap_freezes_what_start_up_built_and_raises_the_young_threshold():
    # In a child process: freezing the test runner's own heap would outlive this test.
    script = (
        "import gc\n"
        "from popagent_core.lifecycle import YOUNG_COLLECTION_THRESHOLD, settle_heap\n"
        "before = gc.get_freeze_count()\n"
        "settle_heap()\n"
        "print(before, gc.get_freeze_count(), gc.get_threshold()[0], YOUNG_COLLECTION_THRESHOLD)\n"
    )
    before, frozen, threshold, expected = map(
        int, subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True).stdout.split()
    )
    assert before == 0
    # Everything imported so far (popagent_core and its dependencies) is out of the collector's view.
    assert frozen > 10_000
    assert threshold == expected > 700


async def test_a_loop_waiting_on_an_event_stops_even_when_something_it_awaited_swallowed_its_cancellation():
    # What asyncio.wait_for does on Python 3.11 when its result and a cancellation race (CPython
    # gh-86296): the awaited call returns and the task goes on, still marked as cancelling.
    event = asyncio.Event()
    rounds = 0

    async def relay_like_loop() -> None:
        nonlocal rounds
        for _ in range(3):  # bounded, so a regression fails instead of hanging the test run
            rounds += 1
            try:
                await asyncio.sleep(0.2)
            except asyncio.CancelledError:
                pass
            await wait_event(event, 0.05)

    task = asyncio.create_task(relay_like_loop())
    await asyncio.sleep(0.01)
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=2)
    assert task in done and task.cancelled()
    assert rounds == 1
