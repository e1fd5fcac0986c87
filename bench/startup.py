"""Stack start time (cold and warm) and idle RSS per service, against baselines from the same run.

Cold: a fresh data folder (initdb, migrations, stream creation). Warm: the same folder
again (what `make run` does every day). Baselines, measured in the same run so machine
noise cancels: the time to start one bare Python process that imports the kernel and
exits, and that process's RSS. The idle RSS is measured twice: as configured (traced, unless the
environment disables it) and untraced (`OTEL_SDK_DISABLED=true`). Targets: warm start <= 10 s,
whole-stack idle RSS <= 600 MB.
"""

from __future__ import annotations

import asyncio
import os
import shutil
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


def main() -> None:
    base_time, base_rss = bare_python_baseline()
    data_dir = Path(tempfile.mkdtemp(prefix="popagent-bench-startup-"))
    try:
        cold, _ = asyncio.run(start_once(data_dir, measure_rss=False))
        warm, rss = asyncio.run(start_once(data_dir, measure_rss=True))
        # The same stack untraced (OTEL_SDK_DISABLED: no tracer provider, span export or stored logs).
        os.environ["OTEL_SDK_DISABLED"] = "true"
        try:
            _, untraced = asyncio.run(start_once(data_dir, measure_rss=True))
        finally:
            del os.environ["OTEL_SDK_DISABLED"]
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    total_rss = sum(rss.values())
    services_rss = sum(v for k, v in rss.items() if not k.startswith("infra:"))
    print(f"baseline: bare python + kernel import start {base_time * 1000:.0f} ms, RSS {base_rss:.1f} MB")
    print(f"cold stack start: {cold:.2f} s ({cold / base_time:.1f}x baseline)")
    print(f"warm stack start: {warm:.2f} s ({warm / base_time:.1f}x baseline)  target <= 10 s")
    for name, value in sorted(rss.items()):
        print(f"idle RSS {name:>14}: {value:6.1f} MB ({value / base_rss:.2f}x baseline)")
    print(f"idle RSS of the seven services: {services_rss:.1f} MB")
    print(f"idle memory of the whole stack (services + NATS + PostgreSQL): {total_rss:.1f} MB  target <= 600 MB")
    for name, value in sorted(untraced.items()):
        print(f"untraced idle RSS {name:>14}: {value:6.1f} MB")
    print(f"idle memory of the whole stack untraced: {sum(untraced.values()):.1f} MB  target <= 600 MB")


if __name__ == "__main__":
    main()
