"""What the sandbox tests share: a probed sandbox, and commands run on a held repository descriptor."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from popagent_agent_runner.workspace.sandbox import CommandResult, Sandbox


async def probed_sandbox() -> Sandbox:
    box = Sandbox(max_processes=64)
    reason = await box.probe()
    assert reason is None, f"bubblewrap does not work here: {reason}"
    return box


@contextlib.contextmanager
def held(folder: Path) -> Iterator[int]:
    """A directory descriptor of `folder`, as a turn holds its repository's."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


async def run(sandbox: Sandbox, repo: Path, command: str, timeout_s: float, cwd: Path | None = None) -> CommandResult:
    with held(repo) as root_fd:
        return await sandbox.run(root_fd, repo, cwd or repo, command, timeout_s)


def processes_with(marker: str) -> list[int]:
    """The pids of this machine's processes whose command line holds `marker` (gone ones left out)."""
    found: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                if marker.encode() in cmdline.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found
