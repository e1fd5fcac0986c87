"""The launcher behind `make run`: the whole stack from one command, and nothing left behind."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from support.launcher import child_pid, health_of, launch
from support.waiting import wait_until

pytestmark = [pytest.mark.timeout(240), pytest.mark.xdist_group("stack-e2e")]

EXPECTED_COMPONENTS = {
    "postgres",
    "observabilityPostgres",
    "nats",
    # Reported, not part of readiness: whether the workspace shell's sandbox works.
    "sandbox",
    "service:agent-runner",
    "service:hooks",
    "service:tasks",
    "service:evolution",
    "service:secrets",
    "service:browser-bridge",
    "supervisor",
}


def gone(processes: list[psutil.Process], timeout_s: float = 10) -> list[psutil.Process]:
    _, alive = psutil.wait_procs(processes, timeout=timeout_s)
    return [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def postgres_of(data_dir: Path) -> psutil.Process | None:
    pid_file = data_dir / "postgres" / "postmaster.pid"
    if not pid_file.exists():
        return None
    pid = int(pid_file.read_text().splitlines()[0])
    return psutil.Process(pid) if psutil.pid_exists(pid) else None


def test_stack_starts_reports_health_restarts_a_killed_service_ctrl_c_leaves_no_process_and_a_second_start_reuses_the_data(
    tmp_path: Path,
) -> None:
    """One stack's life, each stage on the state the previous one left (a whole stack costs a minute
    of a loaded worker to start): it starts healthy; a killed service is restarted (issue 22 finding 1:
    the launcher supervises its children, /api/health says who restarts); Ctrl-C leaves no process;
    a second start on the same data reuses it, and SIGTERM stops it cleanly."""
    # Two agent-runner workers whatever the machine's default, so the worker path runs end to end.
    stack = launch(tmp_path, {"POPAGENT_AGENT_RUNNER_WORKERS": "2"})
    try:
        stack.wait_running()
        health = httpx.get(f"{stack.url}/api/health", headers={"x-popagent-key": stack.api_key})
        assert health.status_code == 200, health.text
        body = health.json()
        assert body["ok"] is True
        assert set(body["components"]) == EXPECTED_COMPONENTS
        assert all(component["ok"] for component in body["components"].values())
        assert body["components"]["supervisor"] == {"ok": True, "detail": ""}
        # make run cloned the default workspace from this repository.
        assert (tmp_path / "workspace" / "popagent" / "README.md").is_file()
        # The key is required once set, and compared exactly.
        assert httpx.get(f"{stack.url}/api/health").status_code == 401
        assert httpx.get(f"{stack.url}/api/health", headers={"x-popagent-key": "x" * 32}).status_code == 401
        key = stack.api_key

        victim = psutil.Process(child_pid(stack, "agent-runner-2"))
        victim.kill()
        # Restarting (the backoff is 0.5 s at first): health names the worker, then it is back.
        wait_until(
            lambda: "agent-runner-2" in health_of(stack)["components"]["supervisor"]["detail"],
            what="the restart",
            within=60,
        )
        wait_until(lambda: health_of(stack)["ok"] is True, what="the stack to be healthy again", within=60)
        assert child_pid(stack, "agent-runner-2") != victim.pid
        assert stack.process.poll() is None
        # One service restarted on purpose, with the documented command.
        before = child_pid(stack, "tasks")
        restart = subprocess.run(
            [sys.executable, "-m", "popagent_dev.launcher", "restart", "tasks", "--data-dir", str(stack.data_dir)],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert restart.returncode == 0, restart.stderr
        wait_until(
            lambda: child_pid(stack, "tasks") != before and health_of(stack)["ok"] is True,
            what="tasks restarted",
            within=60,
        )
        state = json.loads((stack.data_dir / "supervisor.json").read_text())["children"]
        assert state["agent-runner-2"]["restarts"] == 1 and state["agent-runner-2"]["lastExit"] == -9

        # Every process of the stack as it now runs, the restarted ones included.
        children = stack.descendants()
        names = " ".join(" ".join(p.cmdline()) for p in children)
        for module in ("popagent_gateway", "popagent_hooks", "popagent_agent_runner", "nats-server"):
            assert module in names
        runners = [p for p in children if "popagent_agent_runner" in " ".join(p.cmdline())]
        assert len(runners) == 2
        embedded_pg = postgres_of(stack.data_dir)
        assert embedded_pg is not None and embedded_pg.is_running()
        # The launcher only supervises: none of the services' native libraries is loaded in it
        # (gRPC, the database driver, pydantic), nor is the readiness probe left running.
        launcher_libraries = Path(f"/proc/{stack.process.pid}/maps").read_text()
        for library in ("grpc/_cython/cygrpc", "asyncpg/protocol", "pydantic_core/_pydantic_core"):
            assert library not in launcher_libraries, library
        assert "popagent_dev.readiness" not in names

        # Ctrl-C in a terminal signals the whole foreground group: only the launcher must act on it.
        os.killpg(stack.process.pid, signal.SIGINT)
        assert stack.process.wait(30) == 0
        assert gone(children) == []
        assert gone([embedded_pg]) == []
        assert "service agent-runner-2 exited with code -9" in stack.read_rest()
    finally:
        if stack.process.poll() is None:
            stack.process.kill()

    second = launch(tmp_path)
    try:
        second.wait_running()
        assert second.api_key == key
        # Migrations already applied: the ledger survives the restart, nothing re-seeded. The log
        # file holds both starts; only evolution's own schema counts (any process may be the one
        # that migrates the shared observability store).
        lines = (second.data_dir / "logs" / "evolution.log").read_text().splitlines()
        entries = [json.loads(line) for line in lines if line.startswith("{")]
        migrated = [entry for entry in entries if entry.get("msg") == "migrated"]
        assert [entry["schema"] for entry in migrated].count("evolution") == 1
        second.process.send_signal(signal.SIGTERM)
        assert second.process.wait(30) == 0
    finally:
        if second.process.poll() is None:
            second.process.kill()


def test_ctrl_c_also_stops_a_postgres_and_a_nats_restarted_by_hand(tmp_path: Path) -> None:
    """Issue 22 finding 4: servers of the stack's data folder restarted by hand are not left running."""
    # The data folder is one pgserver's user can reach (support.launcher.DataHome), for pg_ctl run as that user.
    stack = launch(tmp_path)
    restarted: list[psutil.Process] = []
    try:
        stack.wait_running()
        first_pg = postgres_of(stack.data_dir)
        assert first_pg is not None
        # PostgreSQL restarted by hand: a new postmaster on the same data folder.
        pg_ctl = Path(first_pg.exe()).with_name("pg_ctl")
        owner = first_pg.username()
        command = [str(pg_ctl), "-D", str(stack.data_dir / "postgres"), "-w", "-m", "fast", "restart"]
        if owner != psutil.Process().username():
            command = ["/usr/sbin/runuser", "-u", owner, "--", *command]
        # The new postmaster keeps pg_ctl's output open: no pipe to wait on.
        with open(tmp_path / "pg_ctl.log", "wb") as log:
            restart = subprocess.run(command, stdout=log, stderr=log, timeout=60, cwd="/")
        assert restart.returncode == 0, (tmp_path / "pg_ctl.log").read_text()
        restarted_pg = postgres_of(stack.data_dir)
        assert restarted_pg is not None and restarted_pg.pid != first_pg.pid
        restarted.append(restarted_pg)
        # NATS restarted by hand with the command line the launcher gave it.
        [nats] = [p for p in stack.descendants() if "nats-server" in " ".join(p.cmdline())]
        nats_command = nats.cmdline()
        nats_command = nats_command[nats_command.index("--") + 1 :] if "--" in nats_command else nats_command
        nats.terminate()
        assert gone([nats]) == []  # a zombie until the launcher reaps it
        restarted_nats = psutil.Process(subprocess.Popen(nats_command, start_new_session=True).pid)
        restarted.append(restarted_nats)
        wait_until(
            lambda: (stack.data_dir / "nats" / "nats-server.pid").read_text().strip() == str(restarted_nats.pid),
            what="the hand-started NATS to write its pid file",
            within=20,
        )
        os.killpg(stack.process.pid, signal.SIGINT)
        stack.process.wait(60)
        assert gone([restarted_pg, restarted_nats]) == []
    finally:
        if stack.process.poll() is None:
            stack.process.kill()
        for server in restarted:
            with contextlib.suppress(psutil.NoSuchProcess):
                server.send_signal(signal.SIGINT)


def test_configured_servers_are_used_instead_of_embedded_ones(tmp_path: Path, pg_dsn: str, nats_url: str) -> None:
    from popagent_dev.embedded import with_database

    database = f"launcher_{os.getpid()}_{time.monotonic_ns()}"
    subprocess.run(
        [
            sys.executable,
            "-c",
            f"import asyncio, asyncpg\n"
            f"async def m():\n c = await asyncpg.connect({pg_dsn!r}); await c.execute('CREATE DATABASE {database}'); await c.close()\n"
            f"asyncio.run(m())",
        ],
        check=True,
    )
    dsn = with_database(pg_dsn, database)
    stack = launch(tmp_path, {"DATABASE_URL": dsn, "OBSERVABILITY_DATABASE_URL": dsn, "NATS_URL": nats_url})
    try:
        stack.wait_running()
        assert not (stack.data_dir / "postgres").exists()
        assert not (stack.data_dir / "nats").exists()
        names = " ".join(" ".join(p.cmdline()) for p in stack.descendants())
        assert "nats-server" not in names
        health = httpx.get(f"{stack.url}/api/health", headers={"x-popagent-key": stack.api_key})
        assert health.status_code == 200
    finally:
        stack.process.send_signal(signal.SIGTERM)
        stack.process.wait(30)


@pytest.mark.parametrize("workers", ["0", "two", "17"])
def test_a_bad_worker_count_exits_2_with_one_line_naming_the_variable(tmp_path: Path, workers: str) -> None:
    stack = launch(tmp_path, {"POPAGENT_AGENT_RUNNER_WORKERS": workers})
    assert stack.process.wait(30) == 2
    output = stack.read_rest().strip().splitlines()
    assert len(output) == 1 and output[0].startswith("POPAGENT_AGENT_RUNNER_WORKERS:")
    assert not stack.data_dir.exists(), "nothing was started"
