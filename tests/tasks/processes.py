"""Worker processes for the multi-process tests and the benchmark:
`python -m popagent_tasks worker --executor <spec>` with its log captured to a file."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parents[1]


class WorkerProcess:
    def __init__(self, env: dict[str, str], log: Path, executor: str = "tasks.executors:scripted") -> None:
        self.log = log
        base = {k: v for k, v in os.environ.items() if not k.startswith(("POPAGENT_", "DATABASE_URL", "NATS_URL"))}
        pythonpath = os.pathsep.join(filter(None, [str(TESTS_DIR), base.get("PYTHONPATH", "")]))
        self._log_file = log.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "popagent_tasks", "worker", "--executor", executor],
            env={**base, **env, "PYTHONPATH": pythonpath},
            stdout=self._log_file,
            stderr=self._log_file,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    async def wait_ready(self, within: float = 30.0) -> None:
        deadline = time.monotonic() + within
        while '"worker started"' not in self.log_text():
            if self.process.poll() is not None:
                raise AssertionError(f"worker exited with {self.process.returncode}:\n{self.log_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"worker not ready within {within} s:\n{self.log_text()[-3000:]}")
            await asyncio.sleep(0.05)

    def signal(self, signum: int) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signum)

    def stop(self, within: float = 15.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(within)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log_file.close()
        return self.process.returncode
