"""Worker processes for the multi-process tests and the benchmark:
`python -m popagent_tasks worker --executor <spec>` with its log captured to a file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from popagent_dev import embedded
from support.waiting import eventually

TESTS_DIR = Path(__file__).resolve().parents[1]


class WorkerProcess:
    def __init__(self, env: dict[str, str], log: Path, executor: str = "tasks.executors:scripted") -> None:
        self.log = log
        base = {k: v for k, v in os.environ.items() if not k.startswith(("POPAGENT_", "DATABASE_URL", "NATS_URL"))}
        pythonpath = os.pathsep.join(filter(None, [str(TESTS_DIR), base.get("PYTHONPATH", "")]))
        self._log_file = log.open("ab")
        self.process = subprocess.Popen(
            # Dies with whatever started it (a benchmark stopped with Ctrl-C leaves no worker behind).
            embedded.orphan_safe([sys.executable, "-m", "popagent_tasks", "worker", "--executor", executor]),
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
        def started() -> bool:
            if self.process.poll() is not None:
                raise AssertionError(f"worker exited with {self.process.returncode}:\n{self.log_text()[-3000:]}")
            return '"worker started"' in self.log_text()

        try:
            await eventually(started, within=within, what="the worker to start")
        except AssertionError as failure:
            if self.process.poll() is not None:
                raise  # it exited: the message has its log already
            raise AssertionError(f"{failure}\n{self.log_text()[-3000:]}") from None

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
