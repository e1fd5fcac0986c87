"""The whole stack as `make run` starts it, for the benchmarks that need every service (the soak, the
graceful stop, the task ramp): the launcher as tests start it (tests/support/launcher.py), the
scripted model server of bench/helpers/soak_model.py as a process, and what the benches read of a
running stack (its children's pids, the tasks service's database).

The importing bench puts the repository root and tests/ on sys.path first.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

from support.launcher import Launched

REPO = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def model_server(
    chunks: int, chunk_delay_ms: float, failure_marker: str = "INJECT-FAILURE", long_chunks: int = 0
) -> Iterator[str]:
    """The URL of bench/helpers/soak_model.py running as a process of its own: every answer `chunks`
    chunks of 4 characters, `chunk_delay_ms` apart; a prompt starting with `failure_marker` fails,
    one starting with `LONG-ANSWER` gets `long_chunks` chunks."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")])}
    command = [sys.executable, "-m", "bench.helpers.soak_model", "--chunks", str(chunks)]
    command += ["--chunk-delay-ms", str(chunk_delay_ms), "--marker", failure_marker, "--long-chunks", str(long_chunks)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.startswith("model gateway listening on "):
            raise RuntimeError(f"model server did not start: {line!r}")
        yield line.removeprefix("model gateway listening on ").strip()
    finally:
        process.terminate()
        process.wait(10)


def keep_draining(stack: Launched) -> None:
    """Read the launcher's output into `stack.output` from a thread, so its pipe never fills."""

    def drain() -> None:
        assert stack.process.stdout is not None
        for line in stack.process.stdout:
            stack.output.append(line)

    threading.Thread(target=drain, daemon=True).start()


def children(stack: Launched) -> dict[str, dict[str, int]]:
    """The launcher's children by name (`gateway`, `agent-runner-1`, ...): pid, restarts, state."""
    return json.loads((stack.data_dir / "supervisor.json").read_text())["children"]


def environment_of(pid: int, name: str) -> str:
    """A variable of a running process's environment (the bench runs as the same user)."""
    for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
        if item.startswith(name.encode() + b"="):
            return item.split(b"=", 1)[1].decode()
    raise KeyError(name)


def tasks_database(stack: Launched) -> str:
    """The DSN the tasks service connects with (its own role; its schema is `tasks`)."""
    return environment_of(children(stack)["tasks"]["pid"], "DATABASE_URL")
