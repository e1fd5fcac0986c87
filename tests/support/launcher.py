"""The launcher behind `make run`, started as a user starts it: one process, the whole stack."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from popagent_dev.embedded import free_port


class Launched:
    def __init__(self, process: subprocess.Popen[str], port: int, data_dir: Path) -> None:
        self.process = process
        self.url = f"http://127.0.0.1:{port}"
        self.data_dir = data_dir
        self.output: list[str] = []

    @property
    def api_key(self) -> str:
        return (self.data_dir / "api-key").read_text().strip()

    def wait_running(self, timeout_s: float = 150) -> None:
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line and self.process.poll() is not None:
                break
            self.output.append(line)
            if line.startswith("popagent is running"):
                return
        raise AssertionError("launcher did not start:\n" + "".join(self.output[-40:]))

    def descendants(self) -> list[psutil.Process]:
        return psutil.Process(self.process.pid).children(recursive=True)

    def read_rest(self) -> str:
        assert self.process.stdout is not None
        return "".join(self.output) + self.process.stdout.read()


def launch(tmp_path: Path, env: dict[str, str] | None = None) -> Launched:
    port = free_port()
    data_dir = tmp_path / "data"
    process = subprocess.Popen(
        [sys.executable, "-m", "popagent_dev.launcher", "--data-dir", str(data_dir), "--port", str(port), "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        # The default workspace is cloned (from this repository) under the test's folder, not the checkout's.
        env={**os.environ, "POPAGENT_WORKSPACE_ROOT": str(tmp_path / "workspace"), **(env or {})},
        # A process group of its own, as a terminal gives it: Ctrl-C is `os.killpg(pid, SIGINT)`.
        start_new_session=True,
    )
    return Launched(process, port, data_dir)
