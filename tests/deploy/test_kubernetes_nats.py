"""The NATS of deploy/kubernetes run for real: the rendered configuration (cluster routes, JetStream,
the per-service users) started as three nats-server processes on loopback, with only the pods'
addresses swapped for loopback ports. The services' streams and agent-runner's turn log are stored
on all three servers with POPAGENT_NATS_STREAM_REPLICAS=3, an older stream of one replica is moved
to three, and a stream keeps taking writes with one server stopped."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client as NatsClient

from popagent_agent_runner.turn.log import STREAM as TURN_LOG_STREAM
from popagent_agent_runner.turn.log import TurnLog
from popagent_core import bus, subjects
from popagent_dev.embedded import free_port, nats_server_binary, terminate, wait_for_port

from .harness import Rendered, render

SERVERS = 3


@dataclass
class Cluster:
    processes: list[subprocess.Popen[bytes]]
    client_ports: list[int]
    passwords: dict[str, str]

    def url(self, user: str, server: int = 0) -> str:
        variable = f"NATS_PASSWORD_{user.upper().replace('-', '_')}"
        return f"nats://{user}:{self.passwords[variable]}@127.0.0.1:{self.client_ports[server]}"


def on_loopback(config: str, number: int, client: list[int], routes: list[int], store: Path) -> str:
    """The rendered nats.conf for server `number` on this machine: each address replaced exactly once."""
    replacements = [
        ("listen: 0.0.0.0:4222", f"listen: 127.0.0.1:{client[number]}"),
        ("http: 0.0.0.0:8222\n", ""),
        ("listen: 0.0.0.0:6222", f"listen: 127.0.0.1:{routes[number]}"),
        ("store_dir: /data", f"store_dir: {store}"),
        ("pid_file: /var/run/nats/nats.pid", f"pid_file: {store}/nats.pid"),
        *((f"nats://nats-{n}.nats-headless:6222", f"nats://127.0.0.1:{routes[n]}") for n in range(SERVERS)),
    ]
    for old, new in replacements:
        assert config.count(old) == 1, f"{old!r} is not once in the rendered nats.conf"
        config = config.replace(old, new)
    return config


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Rendered:
    return render("production", tmp_path_factory.mktemp("production"))


@pytest.fixture
def cluster(rendered: Rendered, tmp_path: Path) -> Iterator[Cluster]:
    files = rendered.config_data("nats")
    passwords = rendered.secret_data("popagent-nats")
    client = [free_port() for _ in range(SERVERS)]
    routes = [free_port() for _ in range(SERVERS)]
    processes = []
    try:
        for number in range(SERVERS):
            folder = tmp_path / f"nats-{number}"
            folder.mkdir()
            (folder / "authorization.conf").write_text(files["authorization.conf"])
            (folder / "nats.conf").write_text(on_loopback(files["nats.conf"], number, client, routes, folder))
            env = {"PATH": os.environ.get("PATH", ""), "POD_NAME": f"nats-{number}", **passwords}
            log = open(folder / "log", "wb")  # noqa: SIM115 - owned by the child
            processes.append(
                subprocess.Popen(
                    [nats_server_binary(), "-c", str(folder / "nats.conf")], stdout=log, stderr=log, env=env
                )
            )
        for number, process in enumerate(processes):
            wait_for_port(client[number], process=process)
        yield Cluster(processes, client, passwords)
    finally:
        for process in processes:
            terminate(process, 5)


@pytest.fixture
async def connect() -> AsyncIterator[object]:
    clients: list[NatsClient] = []

    async def open_client(url: str, name: str) -> NatsClient:
        client = await nats.connect(url, name=name, inbox_prefix=subjects.inbox_prefix(name), connect_timeout=2)
        clients.append(client)
        return client

    yield open_client
    for client in clients:
        await client.close()


async def until_clustered(create: object) -> None:
    """JetStream answers once the three servers have elected a meta leader."""
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        try:
            await create()  # type: ignore[operator]
            return
        except Exception:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.5)


# A cluster's election and a server's stop take seconds; room for a loaded CI machine.
@pytest.mark.timeout(150)
async def test_streams_are_stored_on_all_three_servers(cluster: Cluster, connect: object) -> None:
    tasks = await connect(cluster.url("tasks"), "tasks")  # type: ignore[operator]
    js = tasks.jetstream(timeout=5)
    await until_clustered(lambda: bus.ensure_streams(js, ("tasks",), replicas=3))
    info = await js.stream_info(subjects.stream_name("tasks"))
    assert info.config.num_replicas == 3
    assert info.cluster is not None and len(info.cluster.replicas or []) == SERVERS - 1

    runner = await connect(cluster.url("agent-runner", server=1), "agent-runner")  # type: ignore[operator]
    await TurnLog(runner).ensure_stream(replicas=3)
    log = await runner.jetstream(timeout=5).stream_info(TURN_LOG_STREAM)
    assert log.config.num_replicas == 3

    # One server stopped: the stream still takes (and acknowledges) writes, on the two left.
    terminate(cluster.processes[2], 5)
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        try:
            ack = await js.publish(subjects.TASK_ENQUEUED, b"{}", timeout=3)
            break
        except Exception:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.5)
    assert ack.stream == subjects.stream_name("tasks")


@pytest.mark.timeout(150)
async def test_a_stream_of_one_replica_is_moved_to_three(cluster: Cluster, connect: object) -> None:
    hooks = await connect(cluster.url("hooks"), "hooks")  # type: ignore[operator]
    js = hooks.jetstream(timeout=5)
    await until_clustered(lambda: bus.ensure_streams(js, ("hooks",)))
    assert (await js.stream_info(subjects.stream_name("hooks"))).config.num_replicas == 1
    await bus.ensure_streams(js, ("hooks",), replicas=3)
    assert (await js.stream_info(subjects.stream_name("hooks"))).config.num_replicas == 3
