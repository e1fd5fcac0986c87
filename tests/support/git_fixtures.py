"""Git repositories for the tests: plain git with no machine configuration, a canary-writing
command, and a registered repository as contained self-update requires one (a clean checkout with
its declared commands and a remote that must never change)."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import uuid
from pathlib import Path

from popagent.agent_runner.v1 import agent_runner_pb2 as arpb
from popagent.tasks.v1 import tasks_pb2 as tpb
from support.stacks import MODEL, Stack

# Plain git with no user or system configuration of the machine running the tests.
PLAIN_ENV = {"PATH": os.environ["PATH"], "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}


def marker(ran: Path, name: str) -> str:
    """A shell command that records `name` in the canary folder, then passes its input through."""
    return f"sh -c 'touch {ran}/{name}; cat' --"


def executable(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def plain_git(*args: str, cwd: Path, env: dict[str, str] | None = None) -> None:
    subprocess.run(["git", *args], cwd=cwd, env=env or PLAIN_ENV, capture_output=True, check=False, timeout=60)


def git_out(*args: str, cwd: Path) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, env=PLAIN_ENV, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def snapshot(repository: Path) -> dict[str, str]:
    """Every file of the working tree and the index and HEAD files, by digest (refs/popagent excluded)."""
    found: dict[str, str] = {}
    for path in sorted(repository.rglob("*")):
        relative = path.relative_to(repository).as_posix()
        if path.is_file() and (
            not relative.startswith(".git/") or relative in (".git/index", ".git/HEAD", ".git/config")
        ):
            found[relative] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def registered_repository(folder: Path, *, commands: tuple[str, ...] = ("python3 -m pytest -q",)) -> Path:
    folder.mkdir(parents=True)
    (folder / "app.py").write_text("print('hello')\n")
    (folder / ".popagent").mkdir()
    (folder / ".popagent" / "self-update.json").write_text(json.dumps({"commands": list(commands)}))
    plain_git("init", "-q", "-b", "main", cwd=folder)
    plain_git("add", ".", cwd=folder)
    plain_git("-c", "user.name=t", "-c", "user.email=t@x", "commit", "-qm", "init", cwd=folder)
    plain_git("remote", "add", "origin", "https://example.invalid/never.git", cwd=folder)
    return folder


async def git_workspace(stack: Stack) -> str:
    """A registered workspace that is a clean Git repository: contained self-update works only there."""
    name = f"git{uuid.uuid4().hex[:8]}"
    registered_repository(stack.workspace_root / name)
    await stack.state.CreateWorkspace(arpb.CreateWorkspaceRequest(id=name, name=name, path=name))
    return name


async def self_update_task(stack: Stack, prompt: str, workspace_id: str, max_attempts: int) -> str:
    request = tpb.CreateTaskRequest(
        prompt=prompt, model=MODEL, workspace_id=workspace_id, source="self-update", max_attempts=max_attempts
    )
    return (await stack.tasks.CreateTask(request)).id
