"""Stack start time (cold and warm) and idle RSS per service, against baselines from the same run.

Cold: a fresh data folder (initdb, migrations, stream creation). Warm: the same folder
again (what `make run` does every day). Baselines, measured in the same run so machine
noise cancels: the time to start one bare Python process that imports the kernel and
exits, and that process's RSS. The idle RSS is measured twice: as configured (traced, unless the
environment disables it) and untraced (`OTEL_SDK_DISABLED=true`). The launcher's own RSS is read
off `python -m popagent_dev.launcher` started as `make run` starts it (the other figures come from
a stack this process launches). Targets: warm start <= 10 s, the launcher <= 30 MB, the whole idle
stack (launcher, services, NATS, PostgreSQL) <= 500 MB.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from popagent_dev.embedded import free_port
from popagent_dev.launcher import Stack, StackConfig


def bare_python_baseline() -> tuple[float, float]:
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-c", "import popagent_core.service, sys; sys.stdout.write('x'); sys.stdout.flush(); input()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert process.stdout is not None
    process.stdout.read(1)
    elapsed = time.perf_counter() - started
    rss = psutil.Process(process.pid).memory_info().rss / 2**20
    process.communicate(b"\n")
    return elapsed, rss


async def start_once(data_dir: Path, measure_rss: bool) -> tuple[float, dict[str, float]]:
    started = time.perf_counter()
    stack = Stack(StackConfig(data_dir=data_dir, gateway_port=free_port(), echo_logs=False))
    rss: dict[str, float] = {}
    async with stack.running():
        elapsed = time.perf_counter() - started
        if measure_rss:
            await asyncio.sleep(3)  # let start-up garbage settle before reading "idle"
            for name, child in stack.children.items():
                rss[name] = psutil.Process(child.process.pid).memory_info().rss / 2**20
            for process in psutil.Process().children(recursive=True):
                if process.name() == "nats-server":
                    rss["infra:nats"] = process.memory_info().rss / 2**20
            postmaster = int((data_dir / "postgres" / "postmaster.pid").read_text().split()[0])
            pg = psutil.Process(postmaster)
            # Shared buffers are counted once per backend by RSS; USS avoids that double count.
            rss["infra:postgres"] = sum(p.memory_full_info().uss for p in [pg, *pg.children()]) / 2**20
    return elapsed, rss


def launcher_rss(data_dir: Path) -> float:
    """The idle RSS of the launcher process of `make run`, once its stack is up."""
    environ = dict(os.environ, POPAGENT_WORKSPACE_ROOT=str(data_dir / "workspace"))
    command = [sys.executable, "-m", "popagent_dev.launcher", "--quiet", "--port", str(free_port())]
    launcher = subprocess.Popen([*command, "--data-dir", str(data_dir)], env=environ, stdout=subprocess.PIPE, text=True)
    assert launcher.stdout is not None
    try:
        for line in launcher.stdout:
            if line.startswith("popagent is running"):
                break
        else:
            raise SystemExit(f"the launcher exited with code {launcher.wait()} before the stack was up")
        time.sleep(3)
        return psutil.Process(launcher.pid).memory_info().rss / 2**20
    finally:
        launcher.send_signal(signal.SIGINT)
        launcher.wait(60)


def main() -> None:
    base_time, base_rss = bare_python_baseline()
    data_dir = Path(tempfile.mkdtemp(prefix="popagent-bench-startup-"))
    data_dir.chmod(0o755)  # the embedded PostgreSQL runs as pgserver's own user
    try:
        cold, _ = asyncio.run(start_once(data_dir, measure_rss=False))
        warm, rss = asyncio.run(start_once(data_dir, measure_rss=True))
        # The same stack untraced (OTEL_SDK_DISABLED: no tracer provider, span export or stored logs).
        os.environ["OTEL_SDK_DISABLED"] = "true"
        try:
            _, untraced = asyncio.run(start_once(data_dir, measure_rss=True))
        finally:
            del os.environ["OTEL_SDK_DISABLED"]
        rss["launcher"] = launcher_rss(data_dir)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    total_rss = sum(rss.values())
    services_rss = sum(v for k, v in rss.items() if not k.startswith("infra:") and k != "launcher")
    print(f"baseline: bare python + kernel import start {base_time * 1000:.0f} ms, RSS {base_rss:.1f} MB")
    print(f"cold stack start: {cold:.2f} s ({cold / base_time:.1f}x baseline)")
    print(f"warm stack start: {warm:.2f} s ({warm / base_time:.1f}x baseline)  target <= 10 s")
    for name, value in sorted(rss.items()):
        print(f"idle RSS {name:>14}: {value:6.1f} MB ({value / base_rss:.2f}x baseline)")
    print(f"idle RSS of the seven services: {services_rss:.1f} MB")
    print(f"idle memory of the whole stack (services + NATS + PostgreSQL): {total_rss:.1f} MB  target <= 500 MB")
    print(f"idle RSS of the launcher: {rss['launcher']:.1f} MB  target <= 30 MB")
    for name, value in sorted(untraced.items()):
        print(f"untraced idle RSS {name:>14}: {value:6.1f} MB")
    untraced_total = sum(untraced.values()) + rss["launcher"]
    print(f"idle memory of the whole stack untraced (same launcher): {untraced_total:.1f} MB  target <= 500 MB")


if __name__ == "__main__":
    main()
