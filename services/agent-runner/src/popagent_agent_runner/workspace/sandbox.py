"""Agent shell commands under bubblewrap: no network, nothing of the host but read-only system files.

Every command runs as

    bwrap --unshare-all --unshare-user --cap-drop ALL --disable-userns --new-session --die-with-parent
          <system directories read-only> --proc /proc --dev /dev --tmpfs /tmp --tmpfs $HOME
          --bind-fd <repository fd> <repository> --ro-bind-fd <.git fd> <repository>/.git
          --chdir <repository>/<cwd> --clearenv --setenv PATH/LANG/HOME/TERM ... --remount-ro /
          -- /bin/sh -c <command>

and a language server (`lsp/session.py`) under the same confinement, with the repository
read-only, its own program's folders read-only and JSON-RPC over its stdin and stdout
(`start_server`): one builder (`Sandbox.command_line`) makes both command lines. A user's stdio
MCP server (`mcp/stdio.py`, `start_tool_server`) runs under it too, in a folder of its own.

Why each flag (docs/decisions/sandbox-flags.md):
- `--unshare-all` gives new network, PID, IPC, UTS and cgroup namespaces: the only network is
  the sandbox's own loopback, host processes are invisible.
- As root bubblewrap keeps every capability unless told otherwise, and a sandboxed process
  could then remount a read-only bind writable and write to the host: `--unshare-user` and
  `--cap-drop ALL` leave it none, `--disable-userns` stops it from making a namespace of its own.
- Without a user namespace TIOCSTI works even with `--new-session`; with both it fails.
- `--die-with-parent`: if this service dies (even SIGKILL) the sandbox's PID 1 dies, and with it
  every process of the sandbox's PID namespace.
- `--remount-ro /` last: the sandbox's own root (a tmpfs) is read-only too; the repository bind,
  `/tmp` and `$HOME` stay writable.
- The repository is bound from a directory descriptor the caller holds (`--bind-fd`), never
  from its path: bubblewrap mounts what the descriptor is, so a parent folder swapped for a
  symbolic link after the turn opened the repository cannot redirect the mount.
- `.git` is bound read-only on itself (a directory, or the `gitdir:` file of a worktree or
  submodule), opened without following links relative to the repository descriptor: a
  command cannot plant a hook, `core.fsmonitor` or an alias that a git command on the host
  would run. A `.git` that is a symbolic link is refused (a mount would land on its target
  while the link itself stays replaceable). A repository without `.git` gets none: a command
  may make one, which host-side git commands must treat as untrusted anyway (they run with
  hooks, fsmonitor and aliases disabled), as they must a cloned repository's.

The environment is built from an allow-list (PATH, LANG, HOME, TERM), never the service's:
no database URL, keys or tokens reach a command, and bubblewrap itself is started with only
those variables. bubblewrap runs in a process group of its own, which is killed on timeout,
on cancellation of the turn and on shutdown. Output is bounded to its first 16 KiB and last
48 KiB. The number of processes is bounded by a `pids` cgroup where one can be made, else by
`RLIMIT_NPROC` (which does not bind root). The sandbox's PID 1 is moved into that group while
bubblewrap builds its mounts, and held at `--block-fd` until it is in: moving a process between
cgroups waits for an RCU grace period, which then overlaps the
set-up instead of adding to it, and no command runs before it is counted. Memory is bounded
by a memory cgroup (the same group under cgroup v2, one in the `memory` hierarchy under v1)
where one can be made, else, for a command, by `RLIMIT_AS`. A command's workspace has a disk
budget (`disk_budget.py`): `RLIMIT_FSIZE` at the room left, and a `DiskWatch` while it runs.

Where bubblewrap cannot build the sandbox (not installed, or a container without user
namespaces), a command is refused with "sandbox unavailable: <reason>": it is never run
unsandboxed.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import shutil
import signal
import stat
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Coroutine, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from popagent_agent_runner.workspace.disk_budget import DiskBudget, describe
from popagent_core.processes import process_alive

logger = logging.getLogger(__name__)

HEAD_BYTES = 16 * 1024
TAIL_BYTES = 48 * 1024
DEFAULT_TIMEOUT_S = 120.0
MAX_TIMEOUT_S = 600.0
SANDBOX_HOME = "/home/agent"
SANDBOX_FLAGS = (
    "--unshare-all",
    "--unshare-user",
    "--cap-drop",
    "ALL",
    "--disable-userns",
    "--new-session",
    "--die-with-parent",
)
# /etc files programs commonly need; never the whole of /etc (shadow, the host's git config).
ETC_FILES = (
    "/etc/alternatives",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/localtime",
    "/etc/mime.types",
    "/etc/ssl/certs",
)
ROOT_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
TMPFS_BYTES = 512 * 1024 * 1024
KILL_GRACE_S = 2.0
REPROBE_S = 30.0
# The disk watch measures at most this often, and spends at most a quarter of the time measuring.
DISK_WATCH_MIN_S = 0.5
DISK_WATCH_COST_FACTOR = 4.0


class SandboxUnavailable(Exception):
    """bubblewrap cannot build the sandbox here; the message says why."""


class SandboxRefused(Exception):
    """This repository cannot be confined as it is (its `.git` is a symbolic link); the message says why."""


class SandboxStartCrashed(Exception):
    """bubblewrap died of a signal before it started the command (seen rarely in a busy gRPC
    process); nothing ran, so the command is simply started again."""


# Starts of one command when bubblewrap dies of a signal before the sandbox exists.
START_ATTEMPTS = 3


class BoundedOutput:
    """The first `head` and the last `tail` bytes of a stream, and how many bytes between were left out."""

    def __init__(self, head: int = HEAD_BYTES, tail: int = TAIL_BYTES) -> None:
        self.head_limit = head
        self.tail_limit = tail
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.tail_limit:
                del self.tail[: len(self.tail) - self.tail_limit]

    @property
    def omitted(self) -> int:
        return self.total - len(self.head) - len(self.tail)

    def text(self) -> str:
        if self.omitted:
            marker = f"\n…[{self.omitted} bytes of output left out]…\n".encode()
            return (bytes(self.head) + marker + bytes(self.tail)).decode(errors="replace")
        return (bytes(self.head) + bytes(self.tail)).decode(errors="replace")


@dataclass(frozen=True)
class CommandResult:
    command: str
    exit_code: int | None
    duration_ms: int
    output: str
    omitted_bytes: int
    timed_out: bool = False
    killed: bool = False
    # The kernel killed a process of the command for passing its memory limit (seen with a memory cgroup).
    memory_exceeded: bool = False
    # The workspace passed its disk budget while the command ran: the command was killed.
    disk_budget_exceeded: bool = False
    # The workspace was at its disk budget when the command started: no file could grow.
    disk_full: bool = False


@dataclass(frozen=True)
class CommandGroup:
    """A command's cgroups: its `pids` group, and the group that bounds its memory (the same
    group under cgroup v2, one in the `memory` hierarchy under v1; None: none could be made)."""

    paths: tuple[Path, ...]
    memory: Path | None = None

    def join(self, pid: int) -> None:
        for path in self.paths:
            (path / "cgroup.procs").write_text(str(pid))

    def pids(self) -> list[int]:
        return [int(pid) for pid in (self.paths[0] / "cgroup.procs").read_text().split()]

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of the group for passing its memory limit."""
        if self.memory is None:
            return False
        for name in ("memory.events", "memory.oom_control"):  # cgroup v2, v1
            with contextlib.suppress(OSError, ValueError):
                for line in (self.memory / name).read_text().splitlines():
                    key, _, value = line.partition(" ")
                    if key == "oom_kill" and int(value) > 0:
                        return True
        return False

    def remove(self) -> bool:
        """Remove the groups once empty; False while their last processes are still exiting."""
        removed = True
        for path in self.paths:
            try:
                path.rmdir()
            except FileNotFoundError:
                continue
            except OSError:
                removed = False
        return removed

    async def remove_soon(self) -> None:
        """Remove the groups now, or once their processes are gone (never holding up a result)."""
        for _ in range(100):
            if self.remove():
                return
            await asyncio.sleep(0.05)


def _writable_hierarchy(candidate: Path, limit_file: str) -> bool:
    """Whether this process can make a group under `candidate` that has `limit_file`."""
    if not (candidate / "cgroup.procs").exists() or not os.access(candidate, os.W_OK):
        return False
    probe = candidate / f"popagent-probe-{uuid.uuid4().hex[:8]}"
    try:
        probe.mkdir()
    except OSError:
        return False
    try:
        return (probe / limit_file).exists()
    finally:
        with contextlib.suppress(OSError):
            probe.rmdir()


class _CommandCgroups:
    """Where this process may make a `pids` group and a memory group per command (cgroup v1 or v2)."""

    def __init__(self) -> None:
        self.base: Path | None = None
        self.memory_base: Path | None = None
        for candidate in (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup")):
            if _writable_hierarchy(candidate, "pids.max"):
                self.base = candidate
                break
        for candidate, limit_file in (
            (Path("/sys/fs/cgroup"), "memory.max"),
            (Path("/sys/fs/cgroup/memory"), "memory.limit_in_bytes"),
        ):
            if _writable_hierarchy(candidate, limit_file):
                self.memory_base = candidate
                break
        for base in {self.base, self.memory_base} - {None}:
            assert base is not None
            self._sweep(base)

    # The hierarchies this process has swept of its own PID's groups (left by an earlier service with the same PID).
    _swept_own: set[Path] = set()

    @staticmethod
    def _sweep(base: Path) -> None:
        """Remove the empty groups of services that are gone (rmdir refuses the others). A live
        service's group is empty between its `make` and the move of its sandbox into it: another
        worker or Sandbox starting up then must leave it alone."""
        own = os.getpid()
        for stale in base.glob("popagent-sandbox-*"):
            owner = stale.name.removeprefix("popagent-sandbox-").partition("-")[0]
            if owner.isdigit() and (
                (int(owner) == own and base in _CommandCgroups._swept_own)
                or (int(owner) != own and process_alive(int(owner)))
            ):
                continue
            with contextlib.suppress(OSError):
                stale.rmdir()
        _CommandCgroups._swept_own.add(base)

    def make(self, max_processes: int, memory_bytes: int | None = None) -> CommandGroup | None:
        """The groups of one command: None when no `pids` group can be made (`RLIMIT_NPROC` and
        `RLIMIT_AS` bind it then); a group without `memory` when only the memory one failed."""
        if self.base is None:
            return None
        name = f"popagent-sandbox-{os.getpid()}-{uuid.uuid4().hex}"
        path = self.base / name
        try:
            path.mkdir()
            (path / "pids.max").write_text(str(max_processes))
        except OSError:
            CommandGroup((path,)).remove()
            return None
        if memory_bytes is None or self.memory_base is None:
            return CommandGroup((path,))
        if self.memory_base == self.base:  # cgroup v2: one group holds both limits
            try:
                (path / "memory.max").write_text(str(memory_bytes))
            except OSError:
                return CommandGroup((path,))
            with contextlib.suppress(OSError):
                (path / "memory.swap.max").write_text("0")  # absent without swap accounting
            return CommandGroup((path,), memory=path)
        memory = self.memory_base / name
        try:
            memory.mkdir()
            (memory / "memory.limit_in_bytes").write_text(str(memory_bytes))
        except OSError:
            CommandGroup((memory,)).remove()
            return CommandGroup((path,))
        with contextlib.suppress(OSError):
            (memory / "memory.memsw.limit_in_bytes").write_text(str(memory_bytes))
        return CommandGroup((path, memory), memory=memory)


def _system_binds() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ROOT_LINKS:
        host = Path("/") / name
        if host.is_symlink():
            args += ["--symlink", os.readlink(host), f"/{name}"]
        elif host.is_dir():
            args += ["--ro-bind", str(host), f"/{name}"]
    for path in ETC_FILES:
        args += ["--ro-bind-try", path, path]
    return args


def _read_only_binds(folders: Iterable[str]) -> list[str]:
    """Host folders bound read-only where they are (a link to one kept as a link), outside /usr only."""
    args: list[str] = []
    seen: set[str] = {"/usr"}
    for prefix in folders:
        real = os.path.realpath(prefix)
        if real in seen or real.startswith("/usr/") or not os.path.isdir(real):
            continue
        seen.add(real)
        args += ["--ro-bind", real, real]
        if prefix != real and not prefix.startswith("/usr/"):
            args += ["--symlink", real, prefix]
    return args


def _interpreter_prefixes() -> list[str]:
    return list(dict.fromkeys([sys.base_prefix, sys.prefix]))


def sandbox_path() -> str:
    bins = [os.path.join(prefix, "bin") for prefix in reversed(_interpreter_prefixes())]
    return ":".join([*bins, "/usr/local/bin", "/usr/bin", "/bin"])


def sandbox_environment() -> dict[str, str]:
    """The only variables a command (and bubblewrap itself) gets."""
    return {
        "PATH": sandbox_path(),
        "LANG": os.environ.get("LANG", "C.UTF-8") or "C.UTF-8",
        "HOME": SANDBOX_HOME,
        "TERM": "dumb",
    }


GIT_DIR = ".git"


def _open_git(root_fd: int) -> int | None:
    """A descriptor of the repository's `.git` (directory or `gitdir:` file), None when it has none.

    Opened as a path descriptor without following a link, then checked for what it is: a `.git`
    swapped for a link between a look and an open is never followed."""
    try:
        fd = os.open(GIT_DIR, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=root_fd)
    except FileNotFoundError:
        return None
    mode = os.fstat(fd).st_mode
    if stat.S_ISDIR(mode) or stat.S_ISREG(mode):
        return fd
    os.close(fd)
    raise SandboxRefused(
        "the repository's .git is a symbolic link (or not a file or folder): commands are not run in it, "
        "since its target could not be kept read-only; replace it with the real .git folder"
    )


@dataclass(frozen=True)
class CommandLine:
    """bubblewrap's arguments and the descriptors the process must inherit (`pass_fds`)."""

    argv: list[str]
    pass_fds: list[int]


class Spawn(Protocol):
    """Starts `argv` with the given `subprocess` keywords (env, pass_fds, cwd, start_new_session)."""

    def __call__(self, argv: Sequence[str], **options: Any) -> Awaitable[asyncio.subprocess.Process]: ...


async def _spawn_command(argv: Sequence[str], **options: Any) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        **options,
    )


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


@dataclass
class DiskWatch:
    """Kills a command once its workspace holds more than the disk budget (`disk_budget.py`),
    measuring while it runs as often as a measurement's own cost allows, and has the folder
    measured once more after it ends (not holding up its result)."""

    budget: DiskBudget
    # The watch's own descriptor of the repository, closed when the watch ends.
    root_fd: int
    key: str
    # The workspace had no room left when the command started: no file could grow.
    started_full: bool = False
    exceeded: bool = False

    async def watch(self, process: SandboxProcess) -> None:
        ended = asyncio.ensure_future(process.proc.wait())
        interval = DISK_WATCH_MIN_S
        try:
            while not ended.done():
                await asyncio.wait([ended], timeout=interval)
                if ended.done():
                    break
                began = time.monotonic()
                used = await self.budget.used(self.root_fd, self.key)
                interval = max(DISK_WATCH_MIN_S, DISK_WATCH_COST_FACTOR * (time.monotonic() - began))
                if self.budget.over(used):
                    self.exceeded = True
                    if not ended.done():
                        logger.warning("a command passed its workspace's disk budget; killed", extra={"used": used})
                        process.kill()
                    break
        except Exception:
            logger.warning("the workspace's disk use could not be measured", exc_info=True)
        finally:
            ended.cancel()
            self.budget.measure_soon(self.root_fd, self.key)


class SandboxProcess:
    """One running sandboxed command; its output is read as it comes."""

    def __init__(
        self,
        *,
        sandbox: Sandbox,
        proc: asyncio.subprocess.Process,
        command: str,
        status_fd: int,
        cgroup: CommandGroup | None,
        block_fd: int | None,
        read_output: bool = True,
        disk_watch: DiskWatch | None = None,
    ) -> None:
        self.sandbox = sandbox
        self.proc = proc
        self.command = command
        self.output = BoundedOutput()
        self.started = time.monotonic()
        self.status_fd = status_fd
        self.cgroup = cgroup
        self.timed_out = False
        self.killed = False
        self.memory_exceeded = False
        self.disk_watch = disk_watch
        self.sandbox_started = False
        self.child_pid: int | None = None
        self._status = b""
        self._status_eof = False
        self._status_closed = False
        self._reader = asyncio.create_task(self._read(read_output), name=f"sandbox-output-{proc.pid}")
        self._release = asyncio.create_task(self._join_cgroup(block_fd), name=f"sandbox-cgroup-{proc.pid}")
        self._done = asyncio.create_task(self._finish(), name=f"sandbox-wait-{proc.pid}")
        self._watch = (
            asyncio.create_task(disk_watch.watch(self), name=f"sandbox-disk-{proc.pid}") if disk_watch else None
        )

    async def _read(self, read_output: bool) -> None:
        if not read_output:
            return  # a language server's stdout is its JSON-RPC stream, which its client reads
        assert self.proc.stdout is not None
        while chunk := await self.proc.stdout.read(64 * 1024):
            self.output.feed(chunk)

    async def _join_cgroup(self, block_fd: int | None) -> None:
        """Move the sandbox's PID 1 into the command's cgroup, then let it go on past `--block-fd`.

        Whatever happens before it is in (the move fails, the turn is cancelled), the sandbox is
        killed before the block pipe closes: an end of file would also let it go on, uncounted."""
        if block_fd is None:
            return
        released = False
        try:
            loop = asyncio.get_running_loop()
            while self.child_pid is None and not self._status_eof:
                readable: asyncio.Future[None] = loop.create_future()
                loop.add_reader(self.status_fd, _settle, readable)
                try:
                    await readable
                finally:
                    loop.remove_reader(self.status_fd)
                self._read_status()
            if self.child_pid is not None and self.cgroup is not None:
                await asyncio.to_thread(self.cgroup.join, self.child_pid)
                os.write(block_fd, b"x")
                released = True
        except OSError:
            logger.warning("sandbox could not join its cgroup", exc_info=True)
        finally:
            # bubblewrap that closed its status pipe before reporting a PID 1 never started one.
            if not released and not (self._status_eof and self.child_pid is None):
                self.kill()
            os.close(block_fd)

    async def _finish(self) -> int:
        code = await self.proc.wait()
        with contextlib.suppress(Exception):
            await self._release
        # The output pipe can stay open in a process that outlived bubblewrap only until the
        # namespace collapses; a little grace, then stop reading.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._reader), KILL_GRACE_S)
        self._reader.cancel()
        self._read_status()
        with contextlib.suppress(OSError):
            os.close(self.status_fd)
        # Its number may be another file's from here on (a kill during the clean-up below).
        self._status_closed = True
        self.sandbox_started = self.child_pid is not None
        if self.killed:
            await asyncio.to_thread(self._kill_remaining)
        if self.cgroup is not None:
            self.memory_exceeded = await asyncio.to_thread(self.cgroup.oom_killed)
            if not self.cgroup.remove():
                self.sandbox._cleanup(self.cgroup.remove_soon())
        if self._watch is not None:
            await self._watch
        self.sandbox._running.discard(self)
        return code

    def _read_status(self) -> None:
        """bubblewrap's `--json-status-fd` lines; `child-pid` is its PID 1, the sandbox's init."""
        if self._status_closed:
            return
        with contextlib.suppress(OSError):
            while chunk := os.read(self.status_fd, 4096):
                self._status += chunk
            self._status_eof = True
        if self.child_pid is None:
            for line in self._status.splitlines():
                with contextlib.suppress(ValueError):
                    info = json.loads(line)
                    if isinstance(info, dict) and "child-pid" in info:
                        self.child_pid = int(info["child-pid"])

    def _kill_remaining(self) -> None:
        """A kill during bubblewrap's set-up can come before its PID 1 asked to die with it: every
        process left in the command's cgroup (or its PID 1) is killed here."""
        for _ in range(100):
            pids: list[int] = []
            if self.cgroup is not None:
                with contextlib.suppress(OSError):
                    pids = self.cgroup.pids()
            elif self.child_pid is not None and process_alive(self.child_pid):
                pids = [self.child_pid]
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)

    @property
    def running(self) -> bool:
        return not self._done.done()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def kill(self) -> None:
        """SIGKILL to bubblewrap's process group; the sandbox's PID namespace dies with its PID 1."""
        if self._done.done():
            return
        self.killed = True
        self._read_status()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        if self.child_pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self.child_pid, signal.SIGKILL)

    async def exited(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` for the command to end (it is not killed); whether it has."""
        await asyncio.wait({self._done}, timeout=timeout_s)
        return self._done.done()

    async def wait(self, timeout_s: float | None) -> CommandResult:
        """The command's result; SandboxUnavailable when bubblewrap could not build the sandbox."""
        try:
            code = await asyncio.wait_for(asyncio.shield(self._done), timeout_s)
        except TimeoutError:
            self.timed_out = True
            self.kill()
            code = await self._done
        except asyncio.CancelledError:
            self.kill()
            with contextlib.suppress(Exception):
                await asyncio.shield(self._done)
            raise
        if not self.killed:
            if not self.sandbox_started and code < 0:
                logger.warning("bubblewrap died before starting the sandbox", extra={"signal": -code})
                raise SandboxStartCrashed(f"bubblewrap died of signal {-code} before starting the command")
            if not self.sandbox_started:
                # bubblewrap exited before it could start the command (no user namespaces, ...).
                lines = self.output.text().strip().splitlines()
                self.sandbox._mark_unavailable(lines[0] if lines else f"bwrap exited with {code}")
                self.sandbox.raise_if_unavailable()
            elif code == 1 and self.output.head.startswith(b"bwrap: "):
                # A setup failure inside the new namespaces, or a command printing the same:
                # a probe of `true` tells them apart (a command cannot disable the shell).
                if self.sandbox.probing:
                    self.sandbox._mark_unavailable(self.output.text().strip().splitlines()[0])
                    self.sandbox.raise_if_unavailable()
                if await self.sandbox.probe() is not None:
                    self.sandbox.raise_if_unavailable()
        return self.result(code)

    def result(self, code: int | None = None) -> CommandResult:
        if code is None and self._done.done():
            code = self._done.result()
        return CommandResult(
            command=self.command,
            exit_code=None if self.killed or code is None else code,
            duration_ms=int((time.monotonic() - self.started) * 1000),
            output=self.output.text(),
            omitted_bytes=self.output.omitted,
            timed_out=self.timed_out,
            killed=self.killed and not self.timed_out,
            memory_exceeded=self.memory_exceeded,
            disk_budget_exceeded=self.disk_watch is not None and self.disk_watch.exceeded,
            disk_full=self.disk_watch is not None and self.disk_watch.started_full,
        )


@dataclass
class Sandbox:
    """Starts sandboxed commands and language servers; knows whether bubblewrap works here."""

    bwrap: str | None = field(default_factory=lambda: shutil.which("bwrap"))
    max_processes: int = 256
    # A command's memory (its memory cgroup's limit, else `RLIMIT_AS`); None: unbounded.
    memory_bytes: int | None = None
    # How much a workspace's repository folder may hold (`disk_budget.py`).
    disk_budget: DiskBudget = field(default_factory=lambda: DiskBudget(None))
    extra_read_only: Sequence[str] = ()
    unavailable_reason: str | None = None
    probing: bool = False
    _running: set[SandboxProcess] = field(default_factory=set[SandboxProcess])
    _cgroups: _CommandCgroups | None = None
    _probed_at: float = 0.0
    _cleanups: set[asyncio.Task[None]] = field(default_factory=set[asyncio.Task[None]])

    def __post_init__(self) -> None:
        if self.bwrap is None:
            self.unavailable_reason = "bubblewrap (bwrap) is not installed"

    def _cleanup(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._cleanups.add(task)
        task.add_done_callback(self._cleanups.discard)

    def _mark_unavailable(self, reason: str) -> None:
        self.unavailable_reason = reason[:500]
        logger.warning("sandbox unavailable", extra={"reason": self.unavailable_reason})

    def raise_if_unavailable(self) -> None:
        if self.unavailable_reason is not None:
            raise SandboxUnavailable(f"sandbox unavailable: {self.unavailable_reason}")

    @contextlib.contextmanager
    def command_line(
        self,
        root_fd: int,
        repository: Path,
        cwd: Path,
        program: Sequence[str],
        *,
        writable: bool = True,
        read_only: Sequence[str] = (),
    ) -> Iterator[CommandLine]:
        """The confinement of every sandboxed process (commands and language servers alike).

        `root_fd` is a directory descriptor of the repository the caller holds; it is mounted at
        `repository` (its host path, so paths mean the same on both sides), writable or not, and
        `cwd` is the working folder inside it. `read_only`: more host folders the program needs.
        The descriptors stay open until the block ends: start the process inside it."""
        assert self.bwrap is not None
        git_fd = _open_git(root_fd) if writable else None
        git = ["--ro-bind-fd", str(git_fd), str(repository / GIT_DIR)] if git_fd is not None else []
        try:
            yield CommandLine(
                [
                    self.bwrap,
                    *SANDBOX_FLAGS,
                    *_system_binds(),
                    "--proc",
                    "/proc",
                    "--dev",
                    "/dev",
                    "--size",
                    str(TMPFS_BYTES),
                    "--tmpfs",
                    "/tmp",
                    "--size",
                    str(TMPFS_BYTES),
                    "--tmpfs",
                    SANDBOX_HOME,
                    # The service's own interpreter (and its virtualenv), so `python` in a command
                    # is the toolchain the deployment ships, and a server's own program: after the
                    # sandbox's /tmp, which would hide one under the host's.
                    *_read_only_binds((*_interpreter_prefixes(), *self.extra_read_only, *read_only)),
                    "--bind-fd" if writable else "--ro-bind-fd",
                    str(root_fd),
                    str(repository),
                    *git,
                    "--chdir",
                    str(cwd),
                    "--clearenv",
                    *itertools.chain.from_iterable(("--setenv", k, v) for k, v in sandbox_environment().items()),
                    "--remount-ro",
                    "/",
                    "--",
                    *program,
                ],
                [root_fd] if git_fd is None else [root_fd, git_fd],
            )
        finally:
            if git_fd is not None:
                os.close(git_fd)

    async def start(self, root_fd: int, repository: Path, cwd: Path, command: str) -> SandboxProcess:
        """Start `command` in the sandbox, with the repository (`root_fd`, mounted at `repository`)
        writable and `cwd` (inside it) as working directory, within the memory limit and the
        workspace's disk budget."""
        room = await self.disk_budget.room(root_fd, str(repository))
        watch = DiskWatch(self.disk_budget, os.dup(root_fd), str(repository), room == 0) if room is not None else None
        try:
            return await self._launch(
                root_fd,
                repository,
                cwd,
                ["/bin/sh", "-c", command],
                command,
                _spawn_command,
                memory_bytes=self.memory_bytes,
                file_size_limit=room,
                disk_watch=watch,
            )
        except BaseException:
            if watch is not None:
                os.close(watch.root_fd)
            raise

    async def start_server(
        self, root_fd: int, repository: Path, program: Sequence[str], *, read_only: Sequence[str], spawn: Spawn
    ) -> SandboxProcess:
        """Start a language server in the sandbox, the repository read-only and its working directory.

        `spawn` starts the command line with stdin and stdout as the server's JSON-RPC stream
        (pygls' `LanguageClient.start_io`); the process it answers is bubblewrap's."""
        return await self._launch(
            root_fd,
            repository,
            repository,
            program,
            " ".join(program),
            spawn,
            writable=False,
            read_only=read_only,
            read_output=False,
            memory_bytes=self.memory_bytes,
            memory_rlimit=False,
        )

    async def start_tool_server(
        self, root_fd: int, folder: Path, program: Sequence[str], *, spawn: Spawn
    ) -> SandboxProcess:
        """Start a user's MCP server (stdio, `mcp/stdio.py`) in the sandbox: `folder` (held by `root_fd`)
        is its only writable folder and its working directory; `spawn` starts the command line with
        stdin and stdout as the server's JSON-RPC stream. No network, no service environment."""
        return await self._launch(
            root_fd,
            folder,
            folder,
            program,
            " ".join(program),
            spawn,
            read_output=False,
            memory_bytes=self.memory_bytes,
            memory_rlimit=False,
        )

    async def _launch(
        self,
        root_fd: int,
        repository: Path,
        cwd: Path,
        program: Sequence[str],
        label: str,
        spawn: Spawn,
        *,
        writable: bool = True,
        read_only: Sequence[str] = (),
        read_output: bool = True,
        memory_bytes: int | None = None,
        memory_rlimit: bool = True,
        file_size_limit: int | None = None,
        disk_watch: DiskWatch | None = None,
    ) -> SandboxProcess:
        """`memory_rlimit`: without a memory cgroup, bound the address space instead (not for a
        language server: node's JIT reserves far more address space than it uses)."""
        # A failure may have been passing: look again, at most every REPROBE_S.
        stale = time.monotonic() - self._probed_at >= REPROBE_S
        if self.unavailable_reason is not None and not self.probing and self.bwrap is not None and stale:
            await self.probe()
        if self.unavailable_reason is not None or self.bwrap is None:
            raise SandboxUnavailable(f"sandbox unavailable: {self.unavailable_reason}")
        cgroups = await self.cgroups()
        cgroup = await asyncio.to_thread(cgroups.make, self.max_processes, memory_bytes)
        # Limits are applied by a /bin/sh that then execs bubblewrap (same pid, same process
        # group). (A `preexec_fn` would run Python between fork and exec in this threaded
        # process, which is not safe.) The pids cgroup is joined by the sandbox's PID 1 itself,
        # see `SandboxProcess._join_cgroup`.
        limits = ["ulimit -c 0"]
        if os.getuid() != 0:
            # RLIMIT_NPROC binds every uid but root's.
            # bash spells the process limit -u, dash -p.
            count = int(self.max_processes)
            limits.append(f"{{ ulimit -u {count} 2>/dev/null || ulimit -p {count}; }}")
        if memory_bytes is not None and memory_rlimit and (cgroup is None or cgroup.memory is None):
            # In KiB. It bounds address space, not memory used: a program that reserves more
            # than it touches (a JIT's heap) may fail to start under a limit it would have kept.
            limits.append(f"ulimit -v {max(1, memory_bytes // 1024)}")
        if file_size_limit is not None:
            # In 512-byte blocks (dash, and bash as sh): no file written grows past the room left.
            limits.append(f"ulimit -f {file_size_limit // 512}")
        limits.append('exec "$@"')
        try:
            with self.command_line(root_fd, repository, cwd, program, writable=writable, read_only=read_only) as line:
                proc, read_fd, block_write = await self._spawn(line, limits, cgroup, spawn)
        except BaseException:
            if cgroup is not None:
                cgroup.remove()
            raise
        process = SandboxProcess(
            sandbox=self,
            proc=proc,
            command=label,
            status_fd=read_fd,
            cgroup=cgroup,
            block_fd=block_write,
            read_output=read_output,
            disk_watch=disk_watch,
        )
        self._running.add(process)
        return process

    async def _spawn(
        self, line: CommandLine, limits: list[str], cgroup: CommandGroup | None, spawn: Spawn
    ) -> tuple[asyncio.subprocess.Process, int, int | None]:
        """bubblewrap started with its status pipe (and, with a cgroup, its block pipe): the
        process, the status pipe's read end and the block pipe's write end."""
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        argv = ["--json-status-fd", str(write_fd)]
        pass_fds = [*line.pass_fds, write_fd]
        block_read: int | None = None
        block_write: int | None = None
        if cgroup is not None:
            block_read, block_write = os.pipe()
            argv += ["--block-fd", str(block_read)]
            pass_fds.append(block_read)
        try:
            proc = await spawn(
                ["/bin/sh", "-c", "; ".join(limits), "sh", line.argv[0], *argv, *line.argv[1:]],
                env=sandbox_environment(),
                start_new_session=True,
                pass_fds=pass_fds,
                cwd="/",
            )
        except OSError as exc:
            os.close(read_fd)
            if block_write is not None:
                os.close(block_write)
            self._mark_unavailable(f"bubblewrap could not be started: {exc}")
            raise SandboxUnavailable(f"sandbox unavailable: {self.unavailable_reason}") from None
        finally:
            # bubblewrap holds its own copies from here on.
            os.close(write_fd)
            if block_read is not None:
                os.close(block_read)
        return proc, read_fd, block_write

    async def run(self, root_fd: int, repository: Path, cwd: Path, command: str, timeout_s: float) -> CommandResult:
        for attempt in range(1, START_ATTEMPTS + 1):
            process = await self.start(root_fd, repository, cwd, command)
            try:
                return await process.wait(timeout_s)
            except SandboxStartCrashed:
                if attempt == START_ATTEMPTS:
                    raise SandboxUnavailable("sandbox unavailable: bubblewrap kept dying before it started") from None
        raise AssertionError("unreachable")

    async def cgroups(self) -> _CommandCgroups:
        """Where this process can make a command's cgroups (looked up once)."""
        if self._cgroups is None:
            self._cgroups = await asyncio.to_thread(_CommandCgroups)
        return self._cgroups

    async def limits(self) -> str:
        """What bounds a command on this machine, in words (`GetSandboxStatus`, /api/health)."""
        cgroups = await self.cgroups()
        processes = f"processes ≤ {self.max_processes} (" + (
            "pids cgroup)" if cgroups.base is not None else "RLIMIT_NPROC, which binds no root service)"
        )
        if self.memory_bytes is None:
            memory = "memory unbounded"
        elif cgroups.base is not None and cgroups.memory_base is not None:
            memory = f"memory ≤ {describe(self.memory_bytes)} a command (memory cgroup)"
        else:
            memory = f"memory ≤ {describe(self.memory_bytes)} a command (RLIMIT_AS, address space)"
        budget = self.disk_budget.limit_bytes
        disk = (
            "workspace disk unbounded"
            if budget is None
            else f"workspace disk ≤ {describe(budget)} (RLIMIT_FSIZE and a watch while commands run)"
        )
        return f"{processes}; {memory}; {disk}"

    async def probe(self) -> str | None:
        """Run `true` in a sandbox once: None when it works, else why not (also kept as `unavailable_reason`)."""
        if self.bwrap is None:
            return self.unavailable_reason
        self.unavailable_reason = None
        self.probing = True
        self._probed_at = time.monotonic()
        try:
            with tempfile.TemporaryDirectory(prefix="popagent-sandbox-probe-") as folder:
                root_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
                try:
                    result = await self.run(root_fd, Path(folder), Path(folder), "true", 30.0)
                finally:
                    os.close(root_fd)
        except SandboxUnavailable:
            return self.unavailable_reason
        finally:
            self.probing = False
        if result.exit_code != 0:
            self._mark_unavailable(result.output.strip().splitlines()[0] if result.output.strip() else "probe failed")
        return self.unavailable_reason

    async def close(self) -> None:
        """Kill every running command (service shutdown) and wait for them."""
        running = list(self._running)
        for process in running:
            process.kill()
        for process in running:
            with contextlib.suppress(Exception):
                await process._done
        if self._cleanups:
            await asyncio.wait(set(self._cleanups), timeout=5)
