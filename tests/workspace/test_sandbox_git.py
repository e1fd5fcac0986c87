"""Issue 31, item 3: the sandboxed shell cannot write the repository's `.git`.

The file tools already refuse `.git`; the shell used to write it (`core.fsmonitor`, a `!`
alias, `hooks/pre-commit`), which a git command on the host then ran. Each command here runs
in the real sandbox (bubblewrap) on a repository opened as a turn opens it; the last test
goes through the service, as a model's command.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from chat.helpers import chat, new_workspace_session, of_type, reset_for_chat

from popagent_agent_runner.workspace.sandbox import CommandResult, Sandbox, SandboxRefused
from support.model_gateway import ToolCall, Turn
from support.stacks import CHAT_STACK, Stack, StackSpec
from workspace.sandboxing import held, probed_sandbox

pytestmark = pytest.mark.timeout(60)

CONFIG = "[core]\n\trepositoryformatversion = 0\n"
RUN = "mastra_workspace_execute_command"


@pytest.fixture
async def sandbox() -> Sandbox:
    return await probed_sandbox()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    folder = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(folder)], check=True, env={"PATH": "/usr/bin:/bin"})
    (folder / ".git" / "config").write_text(CONFIG)
    (folder / "README.md").write_text("hello\n")
    return folder


async def run(sandbox: Sandbox, repo: Path, command: str) -> CommandResult:
    with held(repo) as root_fd:
        return await sandbox.run(root_fd, repo, repo, command, 30)


def each_file(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


async def test_the_shell_cannot_write_config_hooks_or_replace_git(sandbox: Sandbox, repo: Path) -> None:
    git = repo / ".git"
    before = each_file(git)
    attempts = {
        "config": "printf '[core]\\n\\tfsmonitor = touch /tmp/ran\\n' >> .git/config",
        "git config": "git config core.fsmonitor 'touch /tmp/ran'",
        "alias": "git config alias.st '!touch /tmp/ran'",
        "hook": "printf '#!/bin/sh\\ntouch /tmp/ran\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit",
        "chmod": "chmod 777 .git/config",
        "remove": "rm -rf .git",
        "rename": "mv .git .git-old",
        "replace": "mkdir -p /tmp/evil/hooks && rm -rf .git; ln -s /tmp/evil .git",
    }
    for name, command in attempts.items():
        result = await run(sandbox, repo, command)
        assert result.exit_code not in (0, None), (name, result.output)
        assert git.is_dir() and not git.is_symlink(), name
        assert each_file(git) == before, name
    # Reading it works, as git commands in the sandbox need; the rest of the repository is writable.
    result = await run(sandbox, repo, "git status --short && echo changed > README.md")
    assert result.exit_code == 0, result.output
    assert (repo / "README.md").read_text() == "changed\n"
    assert not (repo / ".git-old").exists()


@pytest.fixture
def worktree(repo: Path, tmp_path: Path) -> Path:
    """A worktree of `repo`: its `.git` is a file naming the git directory elsewhere."""
    folder = tmp_path / "worktree"
    env = {"PATH": "/usr/bin:/bin"}
    identity = ["-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "-C", str(repo), *identity, "commit", "-q", "--allow-empty", "-m", "x"], check=True, env=env)
    subprocess.run(["git", "-C", str(repo), "worktree", "add", "-q", str(folder)], check=True, env=env)
    return folder


async def test_a_gitdir_file_is_read_only_too(sandbox: Sandbox, worktree: Path) -> None:
    """A worktree's or submodule's `.git` file is bound read-only; the git directory it names is not mounted."""
    pointer = (worktree / ".git").read_text()
    assert pointer.startswith("gitdir: ")
    result = await run(sandbox, worktree, "echo 'gitdir: ./evil' > .git")
    assert result.exit_code not in (0, None), result.output
    result = await run(sandbox, worktree, "rm -f .git")
    assert result.exit_code not in (0, None), result.output
    assert (worktree / ".git").read_text() == pointer
    # The git directory it names is outside the repository: not in the sandbox at all.
    gitdir = pointer.removeprefix("gitdir: ").strip()
    result = await run(sandbox, worktree, f"ls {gitdir}")
    assert result.exit_code not in (0, None), result.output


async def test_a_git_that_is_a_symbolic_link_is_refused(sandbox: Sandbox, repo: Path, tmp_path: Path) -> None:
    """A mount would land on the link's target while the link itself stayed replaceable: refused."""
    real = tmp_path / "elsewhere.git"
    (repo / ".git").rename(real)
    os.symlink(real, repo / ".git")
    with pytest.raises(SandboxRefused, match=r"\.git is a symbolic link"):
        await run(sandbox, repo, "touch ran")
    assert not (repo / "ran").exists()


async def test_a_repository_without_git_runs_commands(sandbox: Sandbox, tmp_path: Path) -> None:
    """Nothing to protect: host-side git commands treat a `.git` made later as untrusted (hooks,
    fsmonitor and aliases disabled), like a cloned repository's."""
    plain = tmp_path / "plain"
    plain.mkdir()
    result = await run(sandbox, plain, "echo made > made.txt")
    assert result.exit_code == 0, result.output
    assert (plain / "made.txt").read_text() == "made\n"


@pytest.fixture
async def stack(started_stack: Callable[[StackSpec], Awaitable[Stack]]) -> Stack:
    """The chat stack (shared with the chat suite), reset for the test."""
    return await reset_for_chat(await started_stack(CHAT_STACK))


async def test_a_turn_s_shell_cannot_write_git(stack: Stack) -> None:
    """Through the service: the model's `mastra_workspace_execute_command` plants neither an
    fsmonitor nor a hook; a `.git` that is a link is a clear tool error."""
    name = f"git-{uuid.uuid4().hex[:8]}"
    folder = stack.workspace_root / name
    await asyncio.to_thread(
        subprocess.run, ["git", "init", "-q", str(folder)], check=True, env={"PATH": "/usr/bin:/bin"}
    )
    (folder / ".git" / "config").write_text(CONFIG)
    before = each_file(folder / ".git")
    plant = (
        "git config core.fsmonitor 'touch /tmp/ran'; "
        "printf '#!/bin/sh\\ntouch /tmp/ran\\n' > .git/hooks/pre-commit; "
        "echo written > notes.txt"
    )
    async with stack.client() as client:
        session = await new_workspace_session(client, name, "git")
        stack.models.push(
            Turn.call(ToolCall(RUN, {"command": plant}, id="plant")),
            Turn.say("done"),
        )
        chunks = await chat(client, session, "set up the hooks")
        [output] = of_type(chunks, "tool-output-available")
        assert "Read-only file system" in output["output"]["output"], output
        assert each_file(folder / ".git") == before
        assert (folder / "notes.txt").read_text() == "written\n"

        real = folder.parent / f"{name}.git"
        (folder / ".git").rename(real)
        os.symlink(real, folder / ".git")
        stack.models.push(Turn.call(ToolCall(RUN, {"command": "touch ran"}, id="linked")), Turn.say("done"))
        chunks = await chat(client, session, "again")
        [error] = of_type(chunks, "tool-output-error")
        assert ".git is a symbolic link" in error["errorText"], error
        assert not (folder / "ran").exists()
