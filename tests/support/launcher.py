"""The launcher behind `make run`, started as a user starts it: one process, the whole stack."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path
from typing import Any

import httpx
import psutil

from popagent_dev.embedded import free_port


class DataHome:
    """The folder a test's launcher keeps its data in (`<home>/data`), under the system temp dir:
    the embedded PostgreSQL runs as pgserver's unprivileged user, which must reach its data
    folder, and a pytest tmp_path (under /tmp/pytest-of-<user>, 0700) is out of its reach.
    Readable by all (0755), as pgserver needs; the secrets in it are 0600 files of their own.
    Removed, with everything in it, once no `Launched` of it is left (or at exit at the latest)."""

    def __init__(self) -> None:
        self.path = Path(tempfile.mkdtemp(prefix="popagent-launch-"))
        self.path.chmod(0o755)
        weakref.finalize(self, shutil.rmtree, self.path, True)


# One home per test folder: a test that starts the launcher again on its tmp_path gets the same data.
_HOMES: weakref.WeakValueDictionary[Path, DataHome] = weakref.WeakValueDictionary()


def home_of(tmp_path: Path) -> DataHome:
    home = _HOMES.get(tmp_path)
    if home is None:
        home = _HOMES[tmp_path] = DataHome()
    return home


class Launched:
    def __init__(self, process: subprocess.Popen[str], port: int, home: DataHome) -> None:
        self.process = process
        self.url = f"http://127.0.0.1:{port}"
        self.home = home  # kept while this stack is: its data is removed after the last one goes
        self.data_dir = home.path / "data"
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
        code = self.process.poll()
        logs = "".join(
            f"--- {log.name} (last lines)\n" + "".join(log.read_text(errors="replace").splitlines(True)[-15:])
            for log in sorted((self.data_dir / "logs").glob("*.log"))
        )
        raise AssertionError(f"launcher did not start (exit code {code}):\n" + "".join(self.output[-40:]) + logs)

    def stop(self) -> None:
        """Ctrl-C to the launcher's process group, as a terminal sends it; killed if not gone in 30 s."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(30)
            except Exception:
                self.process.kill()

    def descendants(self) -> list[psutil.Process]:
        return psutil.Process(self.process.pid).children(recursive=True)

    def read_rest(self) -> str:
        assert self.process.stdout is not None
        return "".join(self.output) + self.process.stdout.read()


def launch(tmp_path: Path, env: dict[str, str] | None = None) -> Launched:
    """`make run`'s launcher as a process of its own, its data in the DataHome of `tmp_path` (the
    same data on a second launch with the same tmp_path), its default workspace under tmp_path."""
    port = free_port()
    home = home_of(tmp_path)
    data_dir = home.path / "data"
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
    return Launched(process, port, home)


def health_of(stack: Launched) -> dict[str, Any]:
    return httpx.get(f"{stack.url}/api/health", headers={"x-popagent-key": stack.api_key}, timeout=5).json()


def child_pid(stack: Launched, name: str) -> int:
    """The pid of the launcher's child `name` (`gateway`, `agent-runner-1`, ...), from supervisor.json."""
    return json.loads((stack.data_dir / "supervisor.json").read_text())["children"][name]["pid"]


TESTS = Path(__file__).resolve().parents[1]
SEEDED_CATALOG = ("fake/fake-chat", "cx/gpt-5.3-codex")


def start_model_server(
    tmp_path: Path, turn: dict[str, object] | None = None, by_prompt: dict[str, dict[str, object]] | None = None
) -> tuple[subprocess.Popen[str], str]:
    """The scripted model server as a process of its own, answering every request with `turn` (or with
    `by_prompt[text]` when the request's last user message contains `text`); and its URL."""
    script = tmp_path / "script.json"
    # The catalog lists the seeded default (every agent inherits it): a chat with or without `model` is not refused.
    models = [{"id": model, "context_length": 128_000} for model in SEEDED_CATALOG]
    document: dict[str, object] = {"turns": [turn or {"text": "Launcher task done."}], "loop": True, "models": models}
    if by_prompt:
        document["by_prompt"] = [{"contains": text, "turn": answer} for text, answer in by_prompt.items()]
    script.write_text(json.dumps(document))
    process = subprocess.Popen(
        [sys.executable, "-m", "support.model_gateway", "--script", str(script), "--no-record"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])},
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("model gateway listening on "), line
    return process, line.removeprefix("model gateway listening on ").strip()
