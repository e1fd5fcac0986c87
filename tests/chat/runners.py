"""A second agent-runner as a real process over a chat stack, for tests that kill one (SIGKILL) mid-turn."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx

from popagent_core.grpc_client import check_health, open_channel
from popagent_dev.embedded import free_port
from popagent_gateway.runners import rendezvous
from support.stacks import Stack
from support.waiting import eventually

# The killed runner's lease: its turns are known lost this long after it died.
LEASE_S = 2


@contextlib.asynccontextmanager
async def runner_process(stack: Stack, tmp_path: Path) -> AsyncIterator[tuple[str, asyncio.subprocess.Process]]:
    """An agent-runner process over the stack's database and services, announced to the gateway."""
    address = f"127.0.0.1:{free_port()}"
    env = {
        **os.environ,
        **{name: str(value) for name, value in stack.runner_env.items()},
        "POPAGENT_AGENT_RUNNER_ADDR": address,
        "POPAGENT_TURN_LEASE_S": str(LEASE_S),
        "POPAGENT_LOG_LEVEL": "WARNING",
    }
    with (tmp_path / "runner.log").open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "popagent_agent_runner", env=env, stdout=log, stderr=log
        )
    try:
        async with open_channel(address, "") as channel:
            await eventually(lambda: check_health(channel), within=60, what="the runner process to serve")
        async with stack.client() as client:

            async def announced() -> str:
                health = (await client.get("/api/health")).json()["components"]["service:agent-runner"]
                return str(health["detail"])

            await eventually(announced, until=lambda detail: address in detail, what="the gateway to hear the runner")
        yield address, process
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def session_on(client: httpx.AsyncClient, runners: list[str], address: str) -> str:
    """A new session whose turns go to `address` first."""
    while True:
        session = f"takeover-{os.urandom(8).hex()}"
        if rendezvous(session, runners)[0] == address:
            break
    created = await client.post("/api/sessions", json={"id": session, "title": "takeover"})
    assert created.status_code == 201, created.text
    return session
