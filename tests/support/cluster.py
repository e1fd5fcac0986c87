"""popagent as several nodes on one machine: a NATS cluster, one PostgreSQL, and each service as
one or more processes, for the three-node run (tests/scale) and bench/scale.py.

Every process is what a Kubernetes pod or a launcher child runs: `python -m <service module>` with
its settings in its environment, built by the launcher's own `child_environment` from one set of
credentials (`generate_credentials`), so each process holds only its share. What differs from
`make run` is only how many of each there are and where they listen:

- NATS: `nats_servers` nats-server processes on loopback, routed to each other as one cluster with
  JetStream (a server name each), every service's user on every server; each service is given the
  URLs of all of them (`NATS_URL`, comma-separated) and the streams are created with
  `POPAGENT_NATS_STREAM_REPLICAS` replicas.
- agent-runner: `runners` processes, each on its own address; gateways route sessions by the
  runners' presence on NATS, and the tasks workers dial the list of all of them.
- gateway and tasks: `gateways` and `task_workers` processes; the other services once.

A node is killed (SIGKILL, as a lost machine) and started again with the same environment, as an
orchestrator restarts a pod; a NATS server is stopped and started again on its own store.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from popagent_core.credentials import generate_credentials
from popagent_core.topology import CALLERS, SERVICES, Service, service_named
from popagent_dev import embedded
from popagent_dev.launcher import child_environment, inherited

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 120.0
# The NATS user that may read everything, for a test's checks.
INSPECTOR = "inspector"


@dataclass
class ClusterConfig:
    workdir: Path
    database_url: str
    observability_url: str
    model_url: str
    nats_servers: int = 3
    gateways: int = 2
    runners: int = 3
    task_workers: int = 2
    # Settings every process gets besides the stack's (POPAGENT_* timings, for example).
    settings: Mapping[str, str] = field(default_factory=dict[str, str])


@dataclass
class Node:
    """One process of a service: `gateway-1`, `agent-runner-3`, `hooks`..."""

    name: str
    service: Service
    env: dict[str, str]
    log: Path
    address: str = ""  # its gRPC address; the gateway's base URL for a gateway
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as output:
            self.process = subprocess.Popen(
                embedded.orphan_safe([sys.executable, "-m", self.service.module]),
                env=self.env,
                stdout=output,
                stderr=subprocess.STDOUT,
            )

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL: the machine under it is gone, nothing of it says goodbye."""
        assert self.process is not None
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.process is not None and self.process.poll() is None:
            embedded.terminate(self.process, timeout_s)

    def tail(self, lines: int = 15) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "".join(text.splitlines(True)[-lines:])


@dataclass
class NatsNode:
    number: int
    client_port: int
    route_port: int
    store: Path
    config_file: Path
    log: Path
    process: embedded.NatsProcess | None = None

    def start(self) -> None:
        self.process = embedded.start_nats(self.store, self.client_port, self.log, self.config_file)

    def kill(self) -> None:
        assert self.process is not None
        self.process.process.send_signal(signal.SIGKILL)
        self.process.process.wait(10)

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()


def nats_cluster_config(number: int, route_ports: list[int], authorization: str) -> str:
    """nats-server `number`'s configuration: its name, routes to every other server, and the
    services' users (`embedded.nats_authorization`); JetStream and its store are
    `embedded.start_nats`'s options."""
    routes = ", ".join(f"nats://127.0.0.1:{port}" for n, port in enumerate(route_ports) if n != number)
    return (
        f"server_name: popagent-nats-{number}\n"
        "cluster {\n"
        "  name: popagent\n"
        f"  listen: 127.0.0.1:{route_ports[number]}\n"
        f"  routes: [{routes}]\n"
        "}\n" + authorization
    )


class Cluster:
    def __init__(self, config: ClusterConfig) -> None:
        self.config = config
        self.api_key = "cluster-api-key-" + secrets.token_urlsafe(16)
        self.nats: list[NatsNode] = []
        self.nodes: dict[str, Node] = {}

    # --- what the test reads -------------------------------------------------------------

    def named(self, prefix: str) -> list[Node]:
        """The nodes of one service (`gateway`, `agent-runner`...), in order."""
        return [node for name, node in self.nodes.items() if name == prefix or name.rpartition("-")[0] == prefix]

    @property
    def gateway_urls(self) -> list[str]:
        return [node.address for node in self.named("gateway")]

    def runner_at(self, address: str) -> Node:
        for node in self.named("agent-runner"):
            if node.address == address:
                return node
        raise KeyError(address)

    def nats_url(self, user: str) -> str:
        password = self._passwords[user]
        return ",".join(f"nats://{user}:{password}@127.0.0.1:{node.client_port}" for node in self.nats)

    # --- start and stop ---------------------------------------------------------------------

    def start(self) -> None:
        workdir = self.config.workdir
        (workdir / "logs").mkdir(parents=True, exist_ok=True)
        self._clone_workspace()
        self.start_nats()
        self._plan_nodes()
        # In two waves, as an orchestrator's restarts settle them: the tasks workers read
        # agent-runner's settings at start and the gateways report healthy once the runners serve.
        callers = [node for node in self.nodes.values() if node.service.name in ("tasks", "gateway")]
        for wave in ([node for node in self.nodes.values() if node not in callers], callers):
            for node in wave:
                node.start()
            self.wait_ready(wave)

    def _clone_workspace(self) -> None:
        """The default workspace (`popagent`, cloned from this repository), as the launcher clones it."""
        env = {name: value for name, value in os.environ.items() if inherited(name)}
        env["POPAGENT_WORKSPACE_ROOT"] = str(self.config.workdir / "workspace")
        env["POPAGENT_DEFAULT_WORKSPACE_SOURCE"] = str(REPO)
        subprocess.run(
            [sys.executable, "-m", "popagent_agent_runner.workspace.checkout"],
            env=env,
            check=True,
            timeout=120,
            stdout=subprocess.DEVNULL,
        )

    def start_nats(self) -> None:
        """The NATS servers alone (`start` starts them first)."""
        count = self.config.nats_servers
        self._passwords = {service.name: secrets.token_hex(24) for service in SERVICES}
        authorization = embedded.nats_authorization({name: json.dumps(p) for name, p in self._passwords.items()})
        # Besides the services' users, one for the checks that read every stream (never a service's).
        self._passwords[INSPECTOR] = secrets.token_hex(24)
        inspector = f"    {{ user: {INSPECTOR}, password: {json.dumps(self._passwords[INSPECTOR])} }}\n"
        assert authorization.endswith("  ]\n}\n")
        authorization = authorization.removesuffix("  ]\n}\n") + inspector + "  ]\n}\n"
        route_ports = [embedded.free_port() for _ in range(count)]
        for number in range(count):
            folder = self.config.workdir / f"nats-{number}"
            folder.mkdir(parents=True, exist_ok=True)
            config_file = folder / "nats.conf"
            store = folder / "store"
            text = authorization if count == 1 else nats_cluster_config(number, route_ports, authorization)
            config_file.write_text(text)
            node = NatsNode(
                number,
                embedded.free_port(),
                route_ports[number],
                store,
                config_file,
                self.config.workdir / "logs" / f"nats-{number}.log",
            )
            self.nats.append(node)
        # All at once: a clustered server waits for its routes before JetStream answers.
        for node in self.nats:
            node.start()

    def _plan_nodes(self) -> None:
        config = self.config
        tokens, digests_json = generate_credentials()
        digests: dict[str, str] = json.loads(digests_json)
        counts = {"gateway": config.gateways, "agent-runner": config.runners, "tasks": config.task_workers}
        addresses: dict[str, list[str]] = {
            service.name: [f"127.0.0.1:{embedded.free_port()}" for _ in range(counts.get(service.name, 1))]
            for service in SERVICES
            if service.grpc_port is not None
        }
        settings: dict[str, str] = {
            "POPAGENT_WORKSPACE_ROOT": str(config.workdir / "workspace"),
            "POPAGENT_BROWSER_PROFILES_DIR": str(config.workdir / "browser-profiles"),
            "POPAGENT_TASKS_EXECUTOR": "popagent_tasks.agent_runner_executor:executor",
            "POPAGENT_NATS_STREAM_REPLICAS": str(min(3, config.nats_servers)),
            "NINEROUTER_URL": config.model_url,
            **config.settings,
        }
        for name, listed in addresses.items():
            # Clients dial every process of a service; each process listens on its own (below).
            settings[service_named(name).address_variable] = ",".join(listed)
        credentials = {
            "DATABASE_URL": config.database_url,
            "OBSERVABILITY_DATABASE_URL": config.observability_url,
            "POPAGENT_API_KEY": self.api_key,
            "POPAGENT_SECRET_KEY": _secret_key(),
        }
        for service in SERVICES:
            own = {
                "POPAGENT_INTERNAL_TOKEN": tokens[service.name],
                "NATS_URL": self.nats_url(service.name),
                "POPAGENT_INTERNAL_CALLERS": json.dumps(
                    {caller: digests[caller] for caller in sorted(CALLERS.get(service.name, ()))}
                ),
            }
            env = child_environment(service.name, os.environ, settings, {**credentials, **own})
            count = counts.get(service.name, 1)
            for number in range(1, count + 1):
                name = service.name if count == 1 else f"{service.name}-{number}"
                log = config.workdir / "logs" / f"{name}.log"
                if service.grpc_port is not None:
                    address = addresses[service.name][number - 1]
                    node_env = dict(env, **{service.address_variable: address})
                else:
                    port = embedded.free_port()
                    address = f"http://127.0.0.1:{port}"
                    node_env = dict(env, POPAGENT_GATEWAY_PORT=str(port))
                self.nodes[name] = Node(name, service, node_env, log, address)

    def wait_ready(self, nodes: list[Node], timeout_s: float = START_TIMEOUT_S) -> None:
        """Until every gRPC node of `nodes` serves and every gateway answers /api/health 200."""
        deadline = time.monotonic() + timeout_s
        grpc_addresses = [node.address for node in nodes if node.service.grpc_port is not None]
        if grpc_addresses:
            probe = subprocess.Popen(
                [sys.executable, "-m", "popagent_dev.readiness", *grpc_addresses],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            try:
                while probe.poll() is None:
                    self._check_alive(nodes)
                    if time.monotonic() > deadline:
                        raise AssertionError(f"not serving within {timeout_s:g} s: {grpc_addresses}")
                    time.sleep(0.1)
            finally:
                if probe.poll() is None:
                    probe.kill()
                probe.wait()
        for node in nodes:
            if node.service.grpc_port is not None:
                continue
            while not self.gateway_healthy(node):
                self._check_alive(nodes)
                if time.monotonic() > deadline:
                    raise AssertionError(f"{node.name} /api/health not 200 within {timeout_s:g} s:\n{node.tail()}")
                time.sleep(0.2)

    def gateway_healthy(self, node: Node) -> bool:
        try:
            answer = httpx.get(f"{node.address}/api/health", headers={"x-popagent-key": self.api_key}, timeout=3)
        except httpx.HTTPError:
            return False
        return answer.status_code == 200

    @staticmethod
    def _check_alive(nodes: list[Node]) -> None:
        for node in nodes:
            if not node.alive:
                raise AssertionError(f"{node.name} exited ({node.process and node.process.returncode}):\n{node.tail()}")

    def restart(self, *nodes: Node) -> None:
        """Start killed nodes again with the environment they had, and wait until they serve."""
        for node in nodes:
            node.start()
        self.wait_ready(list(nodes))

    def stop(self) -> None:
        # The gateways first (they call every other service), NATS last.
        for node in reversed(list(self.nodes.values())):
            if node.process is not None and node.process.poll() is None:
                node.process.terminate()
        for node in reversed(list(self.nodes.values())):
            node.stop()
        for nats in self.nats:
            nats.stop()


def _secret_key() -> str:
    import base64

    return base64.b64encode(os.urandom(32)).decode()


@contextlib.contextmanager
def running_cluster(config: ClusterConfig) -> Iterator[Cluster]:
    cluster = Cluster(config)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
