"""agent-runner as several worker processes: address lists, one address per listener, session affinity."""

from __future__ import annotations

import asyncio
import sys
import uuid
from types import SimpleNamespace
from typing import Any, cast

import grpc
import pytest
from fastapi import Request
from grpc_health.v1 import health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from pydantic import ValidationError

from popagent.agent_runner.v1 import agent_runner_pb2_grpc
from popagent_agent_runner.settings import Settings as RunnerSettings
from popagent_core.grpc_client import channel_target, check_health, open_channel
from popagent_core.settings import split_addresses
from popagent_dev import launcher
from popagent_dev.embedded import free_port
from popagent_gateway.deps import runner_candidates
from popagent_gateway.runners import RunnerDirectory
from popagent_gateway.settings import Settings as GatewaySettings
from popagent_tasks.settings import Settings as TasksSettings
from support.waiting import TEST_WITH_A_START_S, eventually, exited

from .helpers import REPO_ROOT, VALID_CALLERS, VALID_DSN, service_env

GATEWAY_BASE: dict[str, Any] = {"DATABASE_URL": VALID_DSN, "OBSERVABILITY_DATABASE_URL": VALID_DSN}
SERVICE_BASE: dict[str, Any] = {"DATABASE_URL": VALID_DSN, "POPAGENT_INTERNAL_CALLERS": VALID_CALLERS}


def test_one_address_or_a_list_of_ipv4_workers() -> None:
    assert split_addresses("agent-runner:7001") == ["agent-runner:7001"]
    assert split_addresses("unix:/run/popagent/runner.sock") == ["unix:/run/popagent/runner.sock"]
    assert split_addresses("127.0.0.1:7001, 127.0.0.1:7002") == ["127.0.0.1:7001", "127.0.0.1:7002"]
    assert channel_target("127.0.0.1:7001") == ("127.0.0.1:7001", [])
    assert channel_target("127.0.0.1:7001,127.0.0.1:7002") == (
        "ipv4:127.0.0.1:7001,127.0.0.1:7002",
        [("grpc.lb_policy_name", "round_robin")],
    )
    for bad, reason in (
        ("127.0.0.1:7001,", "empty"),
        ("agent-runner:7001,127.0.0.1:7002", "IPv4:port"),
        ("127.0.0.1:7001,127.0.0.1:0", "bad port"),
        ("127.0.0.1:7001,127.0.0.1:http", "bad port"),
    ):
        with pytest.raises(ValueError, match=reason):
            split_addresses(bad)


def test_clients_take_a_list_of_workers_and_the_runner_listens_on_one() -> None:
    workers = "127.0.0.1:7001,127.0.0.1:7002"
    gateway = GatewaySettings(**{**GATEWAY_BASE, "POPAGENT_AGENT_RUNNER_ADDR": workers})
    assert gateway.agent_runner_workers == ["127.0.0.1:7001", "127.0.0.1:7002"]
    tasks = TasksSettings(**{**SERVICE_BASE, "POPAGENT_AGENT_RUNNER_ADDR": workers})
    assert tasks.agent_runner_address == workers
    with pytest.raises(ValidationError, match="IPv4:port"):
        GatewaySettings(**{**GATEWAY_BASE, "POPAGENT_AGENT_RUNNER_ADDR": "runner-a:7001,runner-b:7001"})
    with pytest.raises(ValidationError, match="listens on one address"):
        RunnerSettings(**{**SERVICE_BASE, "POPAGENT_AGENT_RUNNER_ADDR": workers})


@pytest.mark.timeout(TEST_WITH_A_START_S)
async def test_a_runner_given_a_list_exits_2_with_one_line_naming_the_variable() -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "popagent_agent_runner",
        env=service_env(
            DATABASE_URL=VALID_DSN,
            POPAGENT_INTERNAL_CALLERS=VALID_CALLERS,
            POPAGENT_AGENT_RUNNER_ADDR="127.0.0.1:7001,127.0.0.1:7002",
        ),
        cwd=REPO_ROOT,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await exited(process, what="popagent_agent_runner given a list")
    lines = stderr.decode().splitlines()
    assert process.returncode == 2
    assert len(lines) == 1 and "POPAGENT_AGENT_RUNNER_ADDR" in lines[0] and "one address" in lines[0]


class _Workers:
    """Real gRPC channels as the gateway holds them: one per configured worker, no NATS."""

    def __init__(self, workers: list[tuple[str, grpc.aio.Channel]]) -> None:
        directory = RunnerDirectory(static=workers, make_channel=_no_dynamic_channel)
        self.request = cast(Request, SimpleNamespace(app=SimpleNamespace(state=SimpleNamespace(runners=directory))))
        self.channels = [channel for _, channel in workers]

    def worker_of(self, session_id: str) -> int:
        [(_, stub), *_] = runner_candidates(self.request, session_id, agent_runner_pb2_grpc.AgentRunnerServiceStub)
        # The gateway keeps one stub per (class, channel): find the channel this one was made for.
        stubs: dict[tuple[object, grpc.aio.Channel], Any] = self.request.app.state.stubs
        channel = next(channel for (_, channel), known in stubs.items() if known is stub)
        return self.channels.index(channel)


def _no_dynamic_channel(address: str) -> grpc.aio.Channel:
    raise AssertionError(f"no runner announced itself, yet a channel to {address} was asked for")


async def _health_server() -> tuple[grpc.aio.Server, str]:
    address = f"127.0.0.1:{free_port()}"
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(HealthServicer(), server)
    server.add_insecure_port(address)
    await server.start()
    return server, address


async def test_a_session_sticks_to_one_worker_sessions_spread_and_a_down_worker_is_passed_over() -> None:
    (first, first_address), (second, second_address) = await _health_server(), await _health_server()
    try:
        async with open_channel(first_address, "") as up, open_channel(second_address, "") as going:
            workers = _Workers([(first_address, up), (second_address, going)])
            assert await check_health(up, timeout_s=2) and await check_health(going, timeout_s=2)
            sessions = [uuid.uuid4().hex for _ in range(64)]
            chosen = {session: workers.worker_of(session) for session in sessions}
            assert set(chosen.values()) == {0, 1}, "sessions spread over both workers"
            assert all(workers.worker_of(session) == worker for session, worker in chosen.items())

            await second.stop(None)
            await eventually(
                lambda: going.get_state(try_to_connect=True) is grpc.ChannelConnectivity.TRANSIENT_FAILURE,
                within=10,
                what="the channel to a stopped worker to fail",
            )
            # The stopped worker's sessions move to the live one; the others stay where they were.
            assert all(workers.worker_of(session) == 0 for session in sessions)
    finally:
        await first.stop(None)
        await second.stop(None)


@pytest.mark.parametrize(("cores", "workers"), [(None, 1), (1, 1), (2, 2), (3, 2), (4, 2), (6, 3), (8, 4), (64, 4)])
def test_make_run_starts_one_runner_worker_per_two_cores_at_least_two_up_to_four(
    monkeypatch: pytest.MonkeyPatch, cores: int | None, workers: int
) -> None:
    monkeypatch.setattr(launcher.os, "cpu_count", lambda: cores)
    assert launcher.default_runner_workers() == workers
