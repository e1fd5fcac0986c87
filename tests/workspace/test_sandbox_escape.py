"""RELIABILITY row 20 (first part): the bubblewrap sandbox escape suite.

Every probe runs inside the real sandbox (`Sandbox`, bubblewrap on this machine) and reports
what it saw as JSON; the host side checks the other half (nothing arrived, nothing written,
nothing left running).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from popagent.agent_runner.v1 import agent_runner_pb2 as arpb
from popagent_agent_runner.servicers.state import AgentRunnerStateServicer
from popagent_agent_runner.workspace.sandbox import (
    HEAD_BYTES,
    TAIL_BYTES,
    CommandGroup,
    Sandbox,
    SandboxProcess,
    SandboxUnavailable,
)
from support.canary import CANARY, find_canary
from support.waiting import eventually
from workspace.sandboxing import held, probed_sandbox, processes_with, run

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    folder = tmp_path / "repo"
    folder.mkdir()
    (folder / "README.md").write_text("hello\n")
    return folder


@pytest.fixture
async def sandbox() -> Sandbox:
    return await probed_sandbox()


async def start(sandbox: Sandbox, repo: Path, command: str) -> SandboxProcess:
    with held(repo) as root_fd:
        return await sandbox.start(root_fd, repo, repo, command)


async def probe(sandbox: Sandbox, repo: Path, script: str, timeout_s: float = 30) -> dict[str, object]:
    (repo / "probe.py").write_text(textwrap.dedent(script))
    result = await run(sandbox, repo, "python probe.py", timeout_s)
    assert result.exit_code == 0, result.output
    return json.loads(result.output.strip().splitlines()[-1])


async def test_tcp_udp_and_dns_egress_fail(sandbox: Sandbox, repo: Path) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.setblocking(False)
    try:
        seen = await probe(
            sandbox,
            repo,
            f"""
            import errno, json, socket
            out = {{}}
            def attempt(name, fn):
                try:
                    fn()
                    out[name] = "ok"
                except socket.gaierror:
                    out[name] = "gaierror"
                except OSError as exc:
                    out[name] = errno.errorcode.get(exc.errno, str(exc.errno))
            def tcp(host, port):
                s = socket.socket(); s.settimeout(3); s.connect((host, port))
            attempt("tcp_host_loopback", lambda: tcp("127.0.0.1", {server.getsockname()[1]}))
            attempt("tcp_public", lambda: tcp("1.1.1.1", 443))
            attempt("tcp_private", lambda: tcp("10.0.0.1", 80))
            def udp(host, port):
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b"x", (host, port))
            attempt("udp_public", lambda: udp("8.8.8.8", 53))
            udp("127.0.0.1", {udp.getsockname()[1]})  # its own loopback: sent, never arrives on the host
            attempt("dns", lambda: socket.getaddrinfo("example.com", 443))
            out["interfaces"] = [name for _, name in socket.if_nameindex()]
            print(json.dumps(out))
            """,
        )
        assert seen["tcp_host_loopback"] == "ECONNREFUSED"
        assert seen["tcp_public"] == "ENETUNREACH"
        assert seen["tcp_private"] == "ENETUNREACH"
        assert seen["udp_public"] == "ENETUNREACH"
        assert seen["dns"] == "gaierror"
        assert seen["interfaces"] == ["lo"]
        server.setblocking(False)
        with pytest.raises(BlockingIOError):
            server.accept()
        with pytest.raises(BlockingIOError):
            udp.recvfrom(16)
    finally:
        server.close()
        udp.close()


async def test_tiocsti_is_refused(sandbox: Sandbox, repo: Path) -> None:
    seen = await probe(
        sandbox,
        repo,
        """
        import errno, fcntl, json, os, termios
        out = {}
        def inject(name, fd):
            try:
                fcntl.ioctl(fd, termios.TIOCSTI, b"x")
                out[name] = "ok"
            except OSError as exc:
                out[name] = errno.errorcode[exc.errno]
        for fd in (0, 1, 2):
            inject(f"fd{fd}", fd)
        try:
            os.open("/dev/tty", os.O_RDWR)
            out["dev_tty"] = "ok"
        except OSError as exc:
            out["dev_tty"] = errno.errorcode[exc.errno]
        leader, follower = os.openpty()
        inject("own_pty", follower)
        print(json.dumps(out))
        """,
    )
    for name in ("fd0", "fd1", "fd2"):
        assert seen[name] in ("EPERM", "ENOTTY"), seen
    assert seen["dev_tty"] != "ok"
    # Even a terminal it opened itself is not one it may inject into: no capabilities.
    assert seen["own_pty"] in ("EPERM", "ENOTTY", "EIO"), seen


def test_tiocsti_on_an_inherited_terminal(repo: Path) -> None:
    """The CVE-2017-5226 case: the sandbox's stdin is a real terminal of the host."""
    leader, follower = os.openpty()
    (repo / "inject.py").write_text(
        "import errno, fcntl, termios\n"
        "try:\n    fcntl.ioctl(0, termios.TIOCSTI, b'x'); print('ok')\n"
        "except OSError as exc:\n    print(errno.errorcode[exc.errno])\n"
    )
    try:
        with held(repo) as root_fd, Sandbox().command_line(root_fd, repo, repo, ["python", "inject.py"]) as line:
            done = subprocess.run(
                line.argv,
                stdin=follower,
                capture_output=True,
                text=True,
                timeout=30,
                env={"PATH": "/usr/bin"},
                pass_fds=line.pass_fds,
            )
    finally:
        os.close(follower)
        os.close(leader)
    assert done.stdout.strip() in ("EPERM", "ENOTTY"), done.stdout + done.stderr


async def test_canary_is_in_no_environ_visible_inside(sandbox: Sandbox, repo: Path) -> None:
    os.environ["POPAGENT_SUITE_CANARY"] = CANARY
    try:
        result = await run(
            sandbox,
            repo,
            'for f in /proc/[0-9]*/environ /proc/self/environ; do cat "$f" 2>/dev/null; echo; done; env',
            30,
        )
    finally:
        del os.environ["POPAGENT_SUITE_CANARY"]
    assert result.exit_code == 0
    assert find_canary(result.output) is None
    variables = {line.split("=", 1)[0] for line in result.output.splitlines() if "=" in line}
    assert variables <= {"PATH", "LANG", "HOME", "TERM", "PWD", "SHLVL", "_", "OLDPWD"}, variables


PARENT = textwrap.dedent(
    """
    import asyncio, os, sys
    from pathlib import Path
    from popagent_agent_runner.workspace.sandbox import Sandbox

    async def main():
        box = Sandbox()
        repo = Path(sys.argv[1])
        process = await box.start(os.open(repo, os.O_RDONLY), repo, repo, f"sleep 300 # {sys.argv[2]}")
        print(process.pid, flush=True)
        await asyncio.sleep(600)

    asyncio.run(main())
    """
)


def test_sandbox_dies_within_two_seconds_of_its_parent(repo: Path) -> None:
    marker = f"marker-{uuid.uuid4().hex}"
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(repo), marker], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    bwrap_pid = int(parent.stdout.readline())
    deadline = time.monotonic() + 10
    # The parent, bubblewrap, bubblewrap's PID 1 and the sandboxed shell: the sandbox is set up.
    while len(processes_with(marker)) < 4 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(processes_with(marker)) >= 4
    assert bwrap_pid in processes_with(marker)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    killed_at = time.monotonic()
    while processes_with(marker) and time.monotonic() - killed_at < 2:
        time.sleep(0.01)
    assert processes_with(marker) == [], "sandbox outlived its parent by 2 s"


async def test_host_processes_are_invisible(sandbox: Sandbox, repo: Path) -> None:
    seen = await probe(
        sandbox,
        repo,
        """
        import json, os
        print(json.dumps({"pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit())}))
        """,
    )
    pids = seen["pids"]
    assert isinstance(pids, list)
    assert len(pids) <= 4, pids  # bubblewrap's PID 1, the shell, python
    assert os.getpid() not in pids or os.getpid() <= 4


async def test_writes_outside_the_repository_fail_even_after_a_remount(sandbox: Sandbox, repo: Path) -> None:
    marker = f"escape-{uuid.uuid4().hex}"
    venv = Path(sys.prefix)
    seen = await probe(
        sandbox,
        repo,
        f"""
        import ctypes, errno, json, os
        libc = ctypes.CDLL(None, use_errno=True)
        MS_REMOUNT, MS_BIND, MS_RDONLY = 32, 4096, 1
        out = {{}}
        def write(name, path):
            try:
                with open(path, "w") as f:
                    f.write("x")
                out[name] = "ok"
            except OSError as exc:
                out[name] = errno.errorcode[exc.errno]
        targets = {{"usr": "/usr/{marker}", "root": "/{marker}", "etc": "/etc/passwd", "venv": "{venv}/{marker}"}}
        for name, path in targets.items():
            write(name, path)
        for mount_point in ("/usr", "/", "{venv}"):
            rc = libc.mount(None, mount_point.encode(), None, MS_REMOUNT | MS_BIND, None)
            out["remount " + mount_point] = "ok" if rc == 0 else errno.errorcode[ctypes.get_errno()]
        for name, path in targets.items():
            write(name + " after remount", path)
        write("repo", "inside.txt")
        write("tmp", "/tmp/{marker}")
        print(json.dumps(out))
        """,
    )
    for key in ("usr", "root", "etc", "venv"):
        assert seen[key] in ("EROFS", "EACCES", "EPERM"), seen
        assert seen[f"{key} after remount"] in ("EROFS", "EACCES", "EPERM"), seen
    for key in ("remount /usr", "remount /", f"remount {venv}"):
        assert seen[key] == "EPERM", seen
    assert seen["repo"] == "ok" and (repo / "inside.txt").read_text() == "x"
    assert seen["tmp"] == "ok"
    host = await asyncio.to_thread(
        lambda: [os.path.exists(p) for p in (f"/usr/{marker}", venv / marker, f"/tmp/{marker}")]
    )
    assert host == [False, False, False]  # the sandbox's /tmp is its own


async def test_a_fork_bomb_is_held(sandbox: Sandbox, repo: Path) -> None:
    marker = f"bomb-{uuid.uuid4().hex}"
    peak = 0

    async def sample() -> None:
        nonlocal peak
        while True:
            peak = max(peak, len(await asyncio.to_thread(processes_with, marker)))
            await asyncio.sleep(0.05)

    sampler = asyncio.create_task(sample())
    started = time.monotonic()
    try:
        # The bomb goes off in a subshell forked while the table is still empty, and the shell then waits
        # by exec: a shell that forked itself once the table was full would fail that fork and end before
        # the timeout (bash gives up after a few retries, sooner or later with the machine's load).
        # python keeps the marker in its command line.
        command = f"(bomb() {{ bomb | bomb & }}; bomb) & exec python3 -c 'import time; time.sleep(30)' {marker}"
        result = await run(sandbox, repo, command, 3)
    finally:
        sampler.cancel()
    assert result.timed_out and result.exit_code is None
    assert time.monotonic() - started < 8
    # At most the sandbox's process limit (64) existed at any moment, bubblewrap's two included.
    assert 2 < peak <= 64 + 2, peak
    assert processes_with(marker) == []


async def test_a_command_whose_cgroup_cannot_be_joined_never_runs(
    sandbox: Sandbox, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sandbox waits at --block-fd until its PID 1 is in the pids cgroup; when the move fails
    it is killed, never let go uncounted."""
    if sandbox._cgroups is None or sandbox._cgroups.base is None:
        pytest.skip("no pids cgroup can be made here")
    broken = tmp_path / "not-a-cgroup"
    (broken / "cgroup.procs").mkdir(parents=True)  # writing the PID to it fails
    monkeypatch.setattr(
        type(sandbox._cgroups), "make", lambda self, max_processes, memory_bytes=None: CommandGroup((broken,))
    )
    result = await run(sandbox, repo, "touch ran", 10)
    assert result.exit_code is None and result.killed
    assert not (repo / "ran").exists()


async def test_a_second_sandbox_leaves_the_fresh_cgroups_of_the_first_alone(sandbox: Sandbox) -> None:
    """A group is empty between its making and the move of the sandbox into it; a worker or Sandbox
    starting then sweeps only the groups of services that are gone."""
    cgroups = sandbox._cgroups
    if cgroups is None or cgroups.base is None:
        pytest.skip("no pids cgroup can be made here")
    fresh = cgroups.make(8, 64 * 1024 * 1024)
    assert fresh is not None
    try:
        await asyncio.to_thread(type(cgroups))
        assert all(path.is_dir() for path in fresh.paths)
    finally:
        fresh.remove()


async def test_endless_output_is_bounded(sandbox: Sandbox, repo: Path) -> None:
    result = await run(sandbox, repo, "yes popagent", 1.5)
    assert result.timed_out
    assert result.omitted_bytes > 0
    assert len(result.output.encode()) <= HEAD_BYTES + TAIL_BYTES + 100
    assert result.output.startswith("popagent\npopagent\n")
    assert f"[{result.omitted_bytes} bytes of output left out]" in result.output


async def test_the_repository_mount_follows_the_held_descriptor(sandbox: Sandbox, tmp_path: Path) -> None:
    """A parent folder of the repository swapped for a link after the turn opened it (another
    workspace's shell can do that) does not redirect the mount: bubblewrap binds the directory
    the descriptor holds, never a path the kernel walks again."""
    parent = tmp_path / "parent"
    repo = parent / "repo"
    repo.mkdir(parents=True)
    (repo / "which").write_text("original\n")
    decoy = tmp_path / "decoy"
    (decoy / "repo").mkdir(parents=True)
    (decoy / "repo" / "which").write_text("canary\n")
    with held(repo) as root_fd:
        parent.rename(tmp_path / "moved")
        os.symlink(decoy, parent)
        result = await sandbox.run(root_fd, repo, repo, "cat which && echo written > new", 10)
    assert (result.exit_code, result.output) == (0, "original\n")
    assert (tmp_path / "moved" / "repo" / "new").read_text() == "written\n"
    assert not (decoy / "repo" / "new").exists()


async def test_exit_code_duration_and_cwd(sandbox: Sandbox, repo: Path) -> None:
    (repo / "sub").mkdir()
    result = await run(sandbox, repo, "pwd; echo err >&2; exit 3", 10, cwd=repo / "sub")
    assert result.exit_code == 3
    assert result.output == f"{repo / 'sub'}\nerr\n"
    assert result.duration_ms >= 0 and not result.timed_out


async def test_cancellation_and_shutdown_kill_the_process_group(sandbox: Sandbox, repo: Path) -> None:
    marker = f"cancel-{uuid.uuid4().hex}"
    process = await start(sandbox, repo, f"sleep 300 # {marker}")
    waiter = asyncio.create_task(process.wait(600))
    await asyncio.sleep(0)  # the wait has begun
    await eventually(lambda: len(processes_with(marker)) >= 2, within=10, what="the command to start")
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    await asyncio.sleep(0.2)
    assert processes_with(marker) == []

    marker = f"shutdown-{uuid.uuid4().hex}"
    await start(sandbox, repo, f"sleep 300 & sleep 300 # {marker}")
    await eventually(lambda: len(processes_with(marker)) >= 2, within=10, what="the command to start")
    await sandbox.close()
    await asyncio.sleep(0.2)
    assert processes_with(marker) == []


def test_no_user_namespaces_means_sandbox_unavailable(tmp_path: Path) -> None:
    """Inside a sandbox that may not make user namespaces (like a locked-down container),
    the probe reports why and a command is refused, never run unsandboxed."""
    script = tmp_path / "inner.py"
    ran = tmp_path / "ran"
    script.write_text(
        textwrap.dedent(
            f"""
            import asyncio, json, os
            from pathlib import Path
            from popagent_agent_runner.workspace.sandbox import Sandbox, SandboxUnavailable

            async def main():
                box = Sandbox()
                reason = await box.probe()
                repo = Path("{tmp_path}")
                try:
                    await box.run(os.open(repo, os.O_RDONLY), repo, repo, "touch {ran}", 10)
                    refused = ""
                except SandboxUnavailable as exc:
                    refused = str(exc)
                print(json.dumps({{"reason": reason, "refused": refused}}))

            asyncio.run(main())
            """
        )
    )
    outer = [
        "bwrap", "--unshare-user", "--disable-userns", "--cap-drop", "ALL", "--die-with-parent",
        "--ro-bind", "/", "/", "--tmpfs", "/tmp", "--bind", str(tmp_path), str(tmp_path),
        "--proc", "/proc", "--dev", "/dev",
        "--", sys.executable, str(script),
    ]  # fmt: skip
    done = subprocess.run(outer, capture_output=True, text=True, timeout=30, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stdout + done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["reason"], seen
    assert seen["refused"].startswith("sandbox unavailable: "), seen
    assert not ran.exists()


async def test_no_bubblewrap_means_sandbox_unavailable(tmp_path: Path) -> None:
    with pytest.raises(SandboxUnavailable, match=r"sandbox unavailable: bubblewrap \(bwrap\) is not installed"):
        await run(Sandbox(bwrap=None), tmp_path, "true", 5)


async def test_the_sandbox_status_rpc_says_why_commands_are_refused() -> None:
    # Only the sandbox is read by this RPC; the servicer's stores are not needed for it.
    servicer = AgentRunnerStateServicer.__new__(AgentRunnerStateServicer)
    servicer.sandbox = Sandbox(bwrap=None)
    status = await servicer.GetSandboxStatus(arpb.GetSandboxStatusRequest(), None)  # type: ignore[arg-type]
    assert (status.available, status.reason) == (False, "sandbox unavailable: bubblewrap (bwrap) is not installed")
    servicer.sandbox = Sandbox()
    status = await servicer.GetSandboxStatus(arpb.GetSandboxStatusRequest(), None)  # type: ignore[arg-type]
    assert (status.available, status.reason) == (True, "")


NON_ROOT_BOMB = textwrap.dedent(
    """
    import asyncio, json, os, sys
    # sandbox.py needs nothing beyond the standard library, popagent_core.processes and its own workspace modules
    sys.path[:0] = sys.argv[1].split(os.pathsep)
    from pathlib import Path
    from popagent_agent_runner.workspace.sandbox import Sandbox

    async def main():
        box = Sandbox(max_processes=32)
        reason = await box.probe()
        repo = Path(sys.argv[2])
        # The bomb in a subshell forked first, then exec: the shell never forks once the limit is full.
        result = await box.run(os.open(repo, os.O_RDONLY), repo, repo, "(bomb() { bomb | bomb & }; bomb) & exec sleep 30", 3)
        seen = {"reason": reason, "timedOut": result.timed_out, "cannotFork": "Cannot fork" in result.output}
        print(json.dumps({**seen, "outputTail": result.output[-400:]}))

    asyncio.run(main())
    """
)


def test_a_fork_bomb_is_held_for_a_non_root_service() -> None:
    """As in the image (uid 10001, no cgroup to write): RLIMIT_NPROC holds the processes."""
    setpriv = shutil.which("setpriv")
    if os.getuid() != 0 or setpriv is None or not os.path.exists("/usr/bin/python3"):
        pytest.skip("needs root, setpriv and the system python to run the sandbox as another uid")
    # pytest's folders are root's alone: the other uid gets a folder of its own.
    repo = Path(tempfile.mkdtemp(prefix="popagent-non-root-"))
    repo.chmod(0o777)
    top = Path(__file__).resolve().parents[2]
    source = os.pathsep.join(str(top / folder / "src") for folder in ("services/agent-runner", "libs/popagent-core"))
    done = subprocess.run(
        [
            setpriv,
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "/usr/bin/python3",
            "-c",
            NON_ROOT_BOMB,
            source,
            str(repo),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
        check=False,
    )
    shutil.rmtree(repo, ignore_errors=True)
    assert done.returncode == 0, done.stdout + done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    output_tail = seen.pop("outputTail")
    assert seen == {"reason": None, "timedOut": True, "cannotFork": True}, output_tail
