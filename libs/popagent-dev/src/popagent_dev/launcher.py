"""The stack launcher behind `make run`: infrastructure, seven services, health, clean stop.

With DATABASE_URL / OBSERVABILITY_DATABASE_URL / NATS_URL unset it starts embedded
PostgreSQL (pgserver, with pgvector; Unix socket only) and NATS with JetStream under a
git-ignored data folder and reuses them on the next start. Every service is its own
process (agent-runner as `POPAGENT_AGENT_RUNNER_WORKERS` worker processes, by default one
per two cores and at least two: a chat turn is CPU-bound Python, and the gateway sends each
session to one worker); the launcher waits for each one's gRPC health, then the gateway's
/api/health, prints the URL and API key, and on Ctrl-C/SIGTERM stops every child it
started: the services first, then NATS and PostgreSQL. Children also get PR_SET_PDEATHSIG so
a killed launcher leaves no orphans, and run in sessions of their own, so a terminal's Ctrl-C
reaches only the launcher, which stops them in that order.

Supervision: a child that exits (crashed, killed, or restarted on purpose) is reported by
name with its last log lines and started again after a backoff (0.5 s doubling to 30 s);
more than `CRASH_LOOP_LIMIT` restarts within `CRASH_WINDOW_S` leaves it stopped (a crash
loop) while the rest of the stack stays up. Each agent-runner worker is its own child. The
state of every child is written to `<data>/supervisor.json`, which the gateway's
/api/health reports (`POPAGENT_SUPERVISOR_STATE`), and `python -m popagent_dev.launcher
restart <name>` restarts one child.

Each child gets only what its service needs (`child_environment`): the launcher's basic
variables and the user's non-secret popagent settings, the stack's addresses, and of the
credentials only those `popagent_core.topology.SECRET_VARIABLES` gives that service (its own
internal token, its own NATS user, the secret key only for secrets, the API key only for the
gateway...), as deploy/compose.yaml scopes its containers. The embedded NATS refuses a client
without a user (`embedded.nats_authorization`); the passwords are kept in the data folder.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import http.client
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from popagent_core.credentials import generate_credentials
from popagent_core.topology import (
    CALLERS,
    CREDENTIAL_NAME,
    GRPC_SERVICES,
    SECRET_VARIABLES,
    SERVICE_NAMES,
    SERVICES,
    Service,
    holds,
    service_named,
)
from popagent_dev import embedded

REPO_ROOT = Path(__file__).resolve().parents[4]
LOG_TAIL_LINES = 20
RESTART_BASE_S = 0.5
RESTART_MAX_S = 30.0
CRASH_LOOP_LIMIT = 5
CRASH_WINDOW_S = 60.0
SUPERVISOR_STATE = "supervisor.json"
# `restart <name>` appends the name here and sends the launcher SIGUSR1.
RESTART_REQUESTS = "restart-requests"


@dataclass
class Child:
    name: str
    process: asyncio.subprocess.Process
    service: Service
    env: dict[str, str]
    tail: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=LOG_TAIL_LINES))
    pump: asyncio.Task[None] | None = None
    # running | restarting | failed (crash loop: left stopped)
    state: str = "running"
    restarts: list[float] = field(default_factory=list[float])
    last_exit: int | None = None


class StackError(Exception):
    """The stack could not start or a service died."""


MAX_RUNNER_WORKERS = 16


def default_runner_workers() -> int:
    """One agent-runner worker per two cores, at least two where there are two cores, up to four.

    The runner is the largest share of the stack's CPU per streamed token (bench/chat.py), and a
    chat turn's set-up is CPU-bound Python: one process is one core at most, so at high concurrency
    a single worker is what new turns queue behind, and a second one on a second core shortens the
    wait for a first token (bench/resilience.py prints it per concurrency level). At low
    concurrency a second worker changes nothing measurable; it costs a process's memory.
    """
    cores = os.cpu_count() or 1
    return 1 if cores < 2 else max(2, min(4, cores // 2))


@dataclass
class StackConfig:
    data_dir: Path
    gateway_port: int = 8080
    echo_logs: bool = True
    start_timeout_s: float = 60.0
    runner_workers: int = field(default_factory=default_runner_workers)
    # The supervisor's first restart delay (doubling up to RESTART_MAX_S).
    restart_base_s: float = RESTART_BASE_S
    # The user's configuration: the environment the launcher was started with (`main` takes the
    # credentials out of its own, so PostgreSQL, NATS and the clone inherit none of them).
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))


# Of the launcher's environment, what every child is given besides the stack's settings and its
# credentials: the system's and Python's basics, proxies, tracing and gRPC switches, the model
# gateway's and SearXNG's addresses, and the user's popagent settings. A variable the credential
# table lists, or one named like a credential, never passes this way (`inherited`).
INHERITED_VARIABLES = frozenset(
    {
        *("PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "TMPDIR", "TZ", "LANG", "LANGUAGE"),
        # LD_LIBRARY_PATH: an interpreter that needs it to start needs it in every child too.
        *("VIRTUAL_ENV", "LD_LIBRARY_PATH", "SSL_CERT_FILE", "SSL_CERT_DIR", "NINEROUTER_URL", "SEARXNG_URL"),
        *(f"{name}_PROXY" for name in ("HTTP", "HTTPS", "ALL", "NO")),
        *(f"{name}_proxy" for name in ("http", "https", "all", "no")),
    }
)
INHERITED_PREFIXES = ("LC_", "XDG_", "PYTHON", "OTEL_", "GRPC_", "POPAGENT_")


def inherited(name: str) -> bool:
    """Whether the launcher's variable `name` reaches every child as it is."""
    if name in SECRET_VARIABLES or CREDENTIAL_NAME.search(name):
        return False
    return name in INHERITED_VARIABLES or name.startswith(INHERITED_PREFIXES)


def child_environment(
    service: str, environ: Mapping[str, str], settings: Mapping[str, str], credentials: Mapping[str, str]
) -> dict[str, str]:
    """The whole environment of a child running `service`: what it inherits of `environ`, the
    stack's `settings` (addresses, ports, paths), and of `credentials` only what
    SECRET_VARIABLES gives this service."""
    env = {name: value for name, value in environ.items() if inherited(name)}
    env.update(settings)
    env.update({name: value for name, value in credentials.items() if holds(service, name)})
    return env


def _kept_secret(path: Path, make: Callable[[], str]) -> str:
    """The secret in `path`, made by `make()` and written (0600 from its creation) the first time."""
    if not path.exists():
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as file:
            file.write(make())
    return path.read_text().strip()


def _secret_key(data_dir: Path) -> str:
    """POPAGENT_SECRET_KEY for local runs: generated once, kept in the data folder (0600)."""
    import base64

    return _kept_secret(data_dir / "secret-key", lambda: base64.b64encode(os.urandom(32)).decode())


def _api_key(data_dir: Path) -> str:
    return _kept_secret(data_dir / "api-key", lambda: secrets.token_urlsafe(24))


NATS_PASSWORDS = "nats-passwords.json"
NATS_CONFIG = "nats.conf"


def nats_passwords(data_dir: Path) -> dict[str, str]:
    """Each service's password for the embedded NATS: generated once, kept in the data folder (0600);
    a service added since gets one."""
    path = data_dir / NATS_PASSWORDS
    passwords = json.loads(_kept_secret(path, lambda: "{}"))
    missing = [name for name in SERVICE_NAMES if name not in passwords]
    if missing:
        passwords.update({name: secrets.token_hex(24) for name in missing})
        _write_private(path, json.dumps(passwords))
    return passwords


def _write_private(path: Path, text: str) -> None:
    """Replace `path` with `text`, readable by this user only from the moment it exists."""
    partial = path.with_name(path.name + ".tmp")
    partial.unlink(missing_ok=True)
    with os.fdopen(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as file:
        file.write(text)
    partial.replace(path)


def nats_url_of(address: str, user: str, password: str) -> str:
    """`nats://user:password@host:port`: nats-py reads the credentials from the URL."""
    return f"nats://{user}:{password}@{address}"


class Stack:
    """One running popagent stack. Use `async with Stack(config).running() as stack:`."""

    def __init__(self, config: StackConfig) -> None:
        self.config = config
        self.children: dict[str, Child] = {}
        self.env: dict[str, str] = {}
        self.api_key = ""
        self.url = ""
        self._exit = contextlib.AsyncExitStack()
        self.died: asyncio.Queue[Child] = asyncio.Queue()
        self.stopping = False
        self._supervisor: asyncio.Task[None] | None = None
        self._restarts: set[asyncio.Task[None]] = set()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Stack]:
        async with self._exit:
            await self._start()
            yield self

    async def _infrastructure(self) -> tuple[dict[str, str], dict[str, str]]:
        """The stores' URLs, and each service's NATS URL (with its own user on the embedded NATS;
        a configured NATS_URL is passed to every service as given)."""
        data = self.config.data_dir
        environ = self.config.environ
        data.mkdir(parents=True, exist_ok=True)
        (data / "logs").mkdir(exist_ok=True)
        env: dict[str, str] = {}
        database_url = environ.get("DATABASE_URL", "")
        observability_url = environ.get("OBSERVABILITY_DATABASE_URL", "")
        if not database_url or not observability_url:
            admin_dsn = self._exit.enter_context(embedded.postgres(data / "postgres", sole_owner=True))
            database_url = database_url or await embedded.ensure_database(admin_dsn, "popagent")
            observability_url = observability_url or await embedded.ensure_database(admin_dsn, "popagent_observability")
        env["DATABASE_URL"] = database_url
        env["OBSERVABILITY_DATABASE_URL"] = observability_url
        configured_nats = environ.get("NATS_URL", "")
        if configured_nats:
            return env, dict.fromkeys(SERVICE_NAMES, configured_nats)
        passwords = nats_passwords(data)
        config = data / NATS_CONFIG
        _write_private(config, embedded.nats_authorization({name: json.dumps(passwords[name]) for name in passwords}))
        nats = self._exit.enter_context(
            embedded.nats(data / "nats", log_file=data / "logs" / "nats.log", config_file=config)
        )
        address = f"127.0.0.1:{nats.port}"
        return env, {name: nats_url_of(address, name, passwords[name]) for name in SERVICE_NAMES}

    async def _start(self) -> None:
        stores, nats_urls = await self._infrastructure()
        # Registered after the infrastructure so it runs before it on the way out:
        # services stop while PostgreSQL and NATS are still there for their goodbyes.
        self._exit.push_async_callback(self.stop_children)
        environ = self.config.environ
        tokens, digests_json = generate_credentials()
        digests: dict[str, str] = json.loads(digests_json)
        self.api_key = environ.get("POPAGENT_API_KEY") or _api_key(self.config.data_dir)
        addresses = {service.name: f"127.0.0.1:{embedded.free_port()}" for service in GRPC_SERVICES}
        # agent-runner's workers listen one address each; its clients get them all as one list.
        runner = service_named("agent-runner")
        workers = self.config.runner_workers
        runner_addresses = [
            addresses[runner.name],
            *(f"127.0.0.1:{embedded.free_port()}" for _ in range(workers - 1)),
        ]
        # The stack's settings, the same for every child.
        settings: dict[str, str] = {}
        settings["POPAGENT_WORKSPACE_ROOT"] = environ.get("POPAGENT_WORKSPACE_ROOT") or str(REPO_ROOT / "workspace")
        for service in GRPC_SERVICES:
            settings[service.address_variable] = addresses[service.name]
        settings[runner.address_variable] = ",".join(runner_addresses)
        settings["POPAGENT_GATEWAY_PORT"] = str(self.config.gateway_port)
        settings["POPAGENT_SUPERVISOR_STATE"] = str(self.state_path)
        # browser-bridge keeps each browser profile's state in a directory of its own here.
        settings["POPAGENT_BROWSER_PROFILES_DIR"] = environ.get("POPAGENT_BROWSER_PROFILES_DIR") or str(
            self.config.data_dir / "browser-profiles"
        )
        # The tasks worker runs each attempt as an agent turn in agent-runner (POPAGENT_AGENT_RUNNER_ADDR above).
        settings["POPAGENT_TASKS_EXECUTOR"] = (
            environ.get("POPAGENT_TASKS_EXECUTOR") or "popagent_tasks.agent_runner_executor:executor"
        )
        self.env = settings
        # Every credential of the stack; child_environment hands each child its own share.
        credentials = {name: environ[name] for name in SECRET_VARIABLES if environ.get(name)}
        credentials.update(stores)
        credentials["POPAGENT_API_KEY"] = self.api_key
        credentials.setdefault("POPAGENT_SECRET_KEY", _secret_key(self.config.data_dir))

        def environment_of(service: Service) -> dict[str, str]:
            own = {
                "POPAGENT_INTERNAL_TOKEN": tokens[service.name],
                "NATS_URL": nats_urls[service.name],
                "POPAGENT_INTERNAL_CALLERS": json.dumps(
                    {caller: digests[caller] for caller in sorted(CALLERS.get(service.name, ()))}
                ),
            }
            return child_environment(service.name, environ, settings, {**credentials, **own})

        deadline = time.monotonic() + self.config.start_timeout_s
        # All at once: the gateway needs no service to start, only to report healthy.
        listening: dict[str, str] = {}
        for service in SERVICES:
            env = environment_of(service)
            if service != runner:
                await self._spawn(service.name, service, env)
                if service.name in addresses:
                    listening[service.name] = addresses[service.name]
                continue
            for number, address in enumerate(runner_addresses, start=1):
                worker = service.name if workers == 1 else f"{service.name}-{number}"
                await self._spawn(worker, service, dict(env, **{runner.address_variable: address}))
                listening[worker] = address
        self.write_state()
        await self._wait_grpc(listening, deadline)
        self.url = f"http://127.0.0.1:{self.config.gateway_port}"
        await self._wait_http(deadline)
        self._supervisor = asyncio.create_task(self._supervise(), name="supervisor")

    @property
    def state_path(self) -> Path:
        return self.config.data_dir / SUPERVISOR_STATE

    def write_state(self) -> None:
        """Every child's state, for /api/health and `restart`; replaced atomically."""
        state = {
            "launcherPid": os.getpid(),
            "children": {
                name: {
                    "state": child.state,
                    "pid": child.process.pid,
                    "restarts": len(child.restarts),
                    "lastExit": child.last_exit,
                }
                for name, child in self.children.items()
            },
        }
        partial = self.state_path.with_suffix(".tmp")
        partial.write_text(json.dumps(state))
        partial.replace(self.state_path)

    async def _supervise(self) -> None:
        """Restart children that exit, with backoff, until one crash-loops."""
        while True:
            child = await self.died.get()
            if self.stopping or self.children.get(child.name) is not child:
                continue
            child.last_exit = child.process.returncode
            now = time.monotonic()
            recent = [at for at in child.restarts if now - at < CRASH_WINDOW_S]
            sys.stderr.write(self.crash_report(child) + "\n")
            if len(recent) >= CRASH_LOOP_LIMIT:
                child.state = "failed"
                sys.stderr.write(
                    f"service {child.name} crash-looped ({len(recent)} restarts in {CRASH_WINDOW_S:g} s); "
                    f"left stopped: `python -m popagent_dev.launcher restart {child.name}` starts it again\n"
                )
                self.write_state()
                continue
            delay = min(self.config.restart_base_s * 2 ** len(recent), RESTART_MAX_S)
            child.state = "restarting"
            self.write_state()
            self._restarting(self._restart(child, delay, [*recent, now]), child.name)

    def _restarting(self, restart: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(restart, name=f"restart-{name}")
        self._restarts.add(task)
        task.add_done_callback(self._restarts.discard)

    def restart_requested(self) -> None:
        """SIGUSR1: restart the children named in `<data>/restart-requests` (a crash-looped one too)."""
        path = self.config.data_dir / RESTART_REQUESTS
        with contextlib.suppress(FileNotFoundError):
            names = path.read_text().split()
            path.unlink()
            for name in dict.fromkeys(names):
                child = self.children.get(name)
                if child is None or self.stopping:
                    continue
                if child.process.returncode is None:
                    # The supervisor starts it again once it has exited.
                    with contextlib.suppress(ProcessLookupError):
                        child.process.terminate()
                elif child.state == "failed":
                    child.state = "restarting"
                    self.write_state()
                    self._restarting(self._restart(child, 0, []), name)

    async def _restart(self, child: Child, delay_s: float, restarts: list[float]) -> None:
        await asyncio.sleep(delay_s)
        if self.stopping:
            return
        sys.stderr.write(f"restarting service {child.name}\n")
        replacement = await self._spawn(child.name, child.service, child.env)
        replacement.restarts = restarts
        replacement.last_exit = child.last_exit
        replacement.state = "restarting"
        self.write_state()
        address = child.env.get(child.service.address_variable, "") if child.service.grpc_port is not None else ""
        if address:
            with contextlib.suppress(StackError, OSError):
                await self._wait_grpc({child.name: address}, time.monotonic() + 60, replacement)
        if replacement.process.returncode is None and self.children.get(child.name) is replacement:
            replacement.state = "running"
            self.write_state()

    async def _spawn(self, name: str, service: Service, env: dict[str, str]) -> Child:
        """Start `service` as the child `name` (an agent-runner worker has a name of its own)."""
        process = await asyncio.create_subprocess_exec(
            *embedded.orphan_safe([sys.executable, "-m", service.module]),
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            # Not the terminal's process group: Ctrl-C reaches the launcher only, which stops
            # the services in order before the infrastructure they need.
            start_new_session=True,
        )
        child = Child(name, process, service, env)
        child.pump = asyncio.create_task(self._pump(child), name=f"pump-{name}")
        self.children[name] = child
        return child

    async def _pump(self, child: Child) -> None:
        assert child.process.stdout is not None
        log_path = self.config.data_dir / "logs" / f"{child.name}.log"
        # Appending a log line to a local file is not worth a thread hop per line. Unbuffered:
        # each line is one write, so `tail -f` is current and a killed launcher loses nothing.
        with open(log_path, "ab", buffering=0) as log:  # noqa: ASYNC230
            async for raw in child.process.stdout:
                log.write(raw)
                line = raw.decode(errors="replace").rstrip()
                child.tail.append(line)
                if self.config.echo_logs:
                    sys.stdout.write(f"{child.name:>14} | {line}\n")
                    sys.stdout.flush()
        await child.process.wait()
        await self.died.put(child)

    def crash_report(self, child: Child) -> str:
        lines = "\n".join(f"    {line}" for line in child.tail) or "    (no output)"
        return f"service {child.name} exited with code {child.process.returncode}; last log lines:\n{lines}"

    def _check_alive(self) -> None:
        for child in self.children.values():
            if child.process.returncode is not None:
                raise StackError(self.crash_report(child))

    async def _wait_grpc(self, listening: Mapping[str, str], deadline: float, child: Child | None = None) -> None:
        """Until each server of `listening` (child name -> address) reports SERVING, checked by the
        readiness probe (popagent_dev.readiness, a process of its own: the launcher loads no gRPC)."""
        probe = await asyncio.create_subprocess_exec(
            *embedded.orphan_safe([sys.executable, "-m", "popagent_dev.readiness", *listening.values()]),
            env={name: value for name, value in os.environ.items() if inherited(name)},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        assert probe.stdout is not None and probe.stderr is not None
        waiting = {address: name for name, address in listening.items()}
        try:
            while waiting:
                try:
                    line = await asyncio.wait_for(probe.stdout.readline(), 0.1)
                except TimeoutError:
                    line = None
                if line:
                    waiting.pop(line.decode().removeprefix("ready ").strip(), None)
                    continue
                if line == b"":
                    errors = (await probe.stderr.read()).decode(errors="replace").strip()
                    raise StackError(
                        f"the readiness probe exited before {', '.join(waiting.values())} was ready: {errors}"
                    )
                if child is None:
                    self._check_alive()
                elif child.process.returncode is not None:
                    raise StackError(self.crash_report(child))
                if time.monotonic() > deadline:
                    raise StackError(f"service {', '.join(waiting.values())} did not become healthy in time")
        finally:
            if probe.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    probe.kill()
            await probe.wait()

    def _health_status(self) -> int | None:
        """The gateway's /api/health status, None when it does not answer (yet). The standard
        library's client: this runs a few times at start, and httpx would stay loaded for good."""
        connection = http.client.HTTPConnection("127.0.0.1", self.config.gateway_port, timeout=2.0)
        try:
            connection.request("GET", "/api/health", headers={"x-popagent-key": self.api_key})
            return connection.getresponse().status
        except (OSError, http.client.HTTPException):
            return None
        finally:
            connection.close()

    async def _wait_http(self, deadline: float) -> None:
        while True:
            self._check_alive()
            if await asyncio.to_thread(self._health_status) == 200:
                return
            if time.monotonic() > deadline:
                raise StackError("gateway /api/health did not answer 200 in time")
            await asyncio.sleep(0.05)

    async def stop_children(self, timeout_s: float = 10.0) -> None:
        """SIGTERM every child (gateway first), wait, SIGKILL whatever is left."""
        self.stopping = True
        for task in (*([self._supervisor] if self._supervisor else []), *self._restarts):
            task.cancel()
        order = list(reversed(self.children.values()))  # started in topology order: gateway first
        for child in order:
            if child.process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    child.process.terminate()
        for child in order:
            try:
                await asyncio.wait_for(child.process.wait(), timeout_s)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    child.process.kill()
                await child.process.wait()
            if child.pump is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(child.pump, 2)


async def _main(config: StackConfig) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    stack = Stack(config)
    loop.add_signal_handler(signal.SIGUSR1, stack.restart_requested)
    try:
        async with stack.running():
            sys.stdout.write(
                f"\npopagent is running: {stack.url}\n"
                f"API key (x-popagent-key): {stack.api_key}\n"
                f"data folder: {config.data_dir}\nPress Ctrl-C to stop.\n\n"
            )
            sys.stdout.flush()
            # Children that exit are restarted by the supervisor; only a stop ends the stack.
            await stop.wait()
            sys.stdout.write("stopping popagent...\n")
    except StackError as exc:
        sys.stderr.write(f"popagent failed to start: {exc}\n")
        return 1
    return 0


def restart(argv: list[str]) -> None:
    """`python -m popagent_dev.launcher restart <name>...`: ask the running launcher to restart
    those children (`gateway`, `tasks`, `agent-runner-2`, ...; see `<data>/supervisor.json`)."""
    parser = argparse.ArgumentParser(prog="popagent-stack restart", description=restart.__doc__)
    parser.add_argument("names", nargs="+")
    parser.add_argument("--data-dir", type=Path, default=Path(os.environ.get("POPAGENT_DATA_DIR", REPO_ROOT / ".data")))
    args = parser.parse_args(argv)
    data_dir: Path = args.data_dir.resolve()
    try:
        state = json.loads((data_dir / SUPERVISOR_STATE).read_text())
    except FileNotFoundError:
        sys.stderr.write(f"no running stack in {data_dir} (no {SUPERVISOR_STATE})\n")
        raise SystemExit(1) from None
    unknown = [name for name in args.names if name not in state["children"]]
    if unknown:
        sys.stderr.write(f"unknown children {', '.join(unknown)}; the children are {', '.join(state['children'])}\n")
        raise SystemExit(2)
    with open(data_dir / RESTART_REQUESTS, "a") as requests:
        requests.write("".join(f"{name}\n" for name in args.names))
    try:
        os.kill(state["launcherPid"], signal.SIGUSR1)
    except ProcessLookupError:
        sys.stderr.write(f"the launcher (pid {state['launcherPid']}) is not running\n")
        raise SystemExit(1) from None
    sys.stdout.write(f"restart requested: {', '.join(args.names)}\n")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["restart"]:
        restart(argv[1:])
        return
    parser = argparse.ArgumentParser(prog="popagent-stack", description="Start the whole popagent stack.")
    parser.add_argument("--data-dir", type=Path, default=Path(os.environ.get("POPAGENT_DATA_DIR", REPO_ROOT / ".data")))
    parser.add_argument("--port", type=int, default=int(os.environ.get("POPAGENT_GATEWAY_PORT", "8080")))
    parser.add_argument("--quiet", action="store_true", help="do not echo service logs")
    args = parser.parse_args(argv)
    workers = os.environ.get("POPAGENT_AGENT_RUNNER_WORKERS", "")
    if workers and (not workers.isdigit() or not 1 <= int(workers) <= MAX_RUNNER_WORKERS):
        sys.stderr.write(f"POPAGENT_AGENT_RUNNER_WORKERS: must be a whole number from 1 to {MAX_RUNNER_WORKERS}\n")
        raise SystemExit(2)
    config = StackConfig(data_dir=args.data_dir.resolve(), gateway_port=args.port, echo_logs=not args.quiet)
    if workers:
        config.runner_workers = int(workers)
    # The configuration is in config.environ now: what the launcher starts itself (PostgreSQL,
    # NATS, the clone) inherits no credential, and each service gets its own from child_environment.
    for name in [name for name in os.environ if name in SECRET_VARIABLES or CREDENTIAL_NAME.search(name)]:
        del os.environ[name]
    clone_default_workspace()
    raise SystemExit(asyncio.run(_main(config)))


def clone_default_workspace() -> None:
    """workspace/popagent, cloned when absent (from this repository unless
    POPAGENT_DEFAULT_WORKSPACE_SOURCE names another); a failure is one line, never a stop.
    It runs git on a source the user named, with no credential of the stack."""
    env = {name: value for name, value in os.environ.items() if inherited(name)}
    env.setdefault("POPAGENT_WORKSPACE_ROOT", str(REPO_ROOT / "workspace"))
    env.setdefault("POPAGENT_DEFAULT_WORKSPACE_SOURCE", str(REPO_ROOT))
    subprocess.run([sys.executable, "-m", "popagent_agent_runner.workspace.checkout"], env=env, check=False)


if __name__ == "__main__":
    main()
