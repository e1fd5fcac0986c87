"""A workspace's disk budget (POPAGENT_WORKSPACE_DISK_MB): how much its repository folder may hold.

The repository is the host's disk: a command that writes without end fills it for every
workspace and service. There is no quota to lean on (a bind mount cannot carry one, and
project quotas need a file system set up for them), so the budget is held three ways:

- a sandboxed command starts with `RLIMIT_FSIZE` at the room left, so no single file it
  writes grows past the budget (the writer gets `SIGXFSZ`, "File size limit exceeded"); at or
  over the budget the limit is 0: files can be removed or truncated, none can grow;
- while it runs, a watchdog measures the folder and kills the command once the folder holds
  more than the budget (many files each under the limit): the overshoot is at most what the
  command writes between two measurements;
- the file tools refuse a write that would take the folder past the budget.

Usage is the space allocated to everything under the repository folder, `.git` included, as
`du -l` counts it (a hard-linked file at each of its names), found by an iterative walk over directory
descriptors that follows no symbolic link. Folders more than `MAX_DEPTH` levels down are not
entered (a walk holds a descriptor a level).
"""

from __future__ import annotations

import asyncio
import os
import stat
import time
from dataclasses import dataclass, field

from popagent_agent_runner.workspace.paths import WorkspaceRefusal

MAX_DEPTH = 1024
# A measured usage is reused this long by the file tools (plus what they wrote meanwhile).
REUSE_S = 5.0
MIB = 1024 * 1024
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def used_bytes(root_fd: int) -> int:
    """The space allocated to everything below the directory `root_fd` (the folder itself left out)."""
    total = 0
    stack: list[tuple[int, list[os.DirEntry[str]]]] = []

    def enter(fd: int) -> None:
        try:
            with os.scandir(fd) as scan:
                items = list(scan)
        except OSError:
            items = []
        stack.append((fd, items))

    enter(root_fd)
    try:
        while stack:
            fd, items = stack[-1]
            if not items:
                stack.pop()
                if fd != root_fd:
                    os.close(fd)
                continue
            item = items.pop()
            try:
                info = item.stat(follow_symlinks=False)
            except OSError:
                continue
            total += info.st_blocks * 512
            if not stat.S_ISDIR(info.st_mode) or len(stack) > MAX_DEPTH:
                continue
            try:
                sub = os.open(item.name, _DIRECTORY_FLAGS, dir_fd=fd)
            except OSError:
                continue
            try:
                enter(sub)
            except BaseException:
                os.close(sub)
                raise
    finally:
        for fd, _ in stack:
            if fd != root_fd:
                os.close(fd)
    return total


def describe(limit_bytes: int) -> str:
    return f"{limit_bytes // MIB} MiB" if limit_bytes >= MIB else f"{limit_bytes} bytes"


@dataclass
class DiskBudget:
    """The budget every workspace has; None: none (not measured, nothing refused)."""

    limit_bytes: int | None
    # Per repository folder: when its usage was measured, and what it was plus writes since.
    _known: dict[str, tuple[float, int]] = field(default_factory=dict[str, tuple[float, int]])
    # Per repository folder: the measurement made after a command ended, still under way.
    _pending: dict[str, asyncio.Task[int]] = field(default_factory=dict[str, asyncio.Task[int]])

    def measure_soon(self, root_fd: int, key: str) -> None:
        """Measure after a command ended, without holding up its result (the model reads it
        meanwhile); the next command or write of the folder waits for it. Takes `root_fd`."""

        async def measure() -> int:
            try:
                return await self.used(root_fd, key)
            finally:
                os.close(root_fd)

        task = asyncio.create_task(measure(), name=f"disk-budget-{key}")
        self._pending[key] = task
        task.add_done_callback(lambda done: self._pending.pop(key, None) if self._pending.get(key) is done else None)

    async def used(self, root_fd: int, key: str) -> int:
        """Measure the repository held by `root_fd` now (`key`: its path, for the file tools' reuse)."""
        used = await asyncio.to_thread(used_bytes, root_fd)
        self._known[key] = (time.monotonic(), used)
        return used

    async def _recent(self, root_fd: int, key: str) -> tuple[float, int]:
        """The usage measured within REUSE_S (plus the file tools' writes since), else measured now.
        A command's watch has the folder measured once more after it ends (`measure_soon`), so a
        command that follows another within REUSE_S walks nothing before it starts."""
        pending = self._pending.get(key)
        if pending is not None:
            await asyncio.wait([pending])
        known = self._known.get(key)
        if known is None or time.monotonic() - known[0] >= REUSE_S:
            await self.used(root_fd, key)
            known = self._known[key]
        return known

    async def room(self, root_fd: int, key: str) -> int | None:
        """How many bytes the repository may still grow by (0 at or over the budget); None: no budget."""
        if self.limit_bytes is None:
            return None
        _, used = await self._recent(root_fd, key)
        return max(0, self.limit_bytes - used)

    async def make_room(self, root_fd: int, key: str, growth: int) -> None:
        """Before a file tool writes: WorkspaceRefusal when `growth` more bytes would pass the budget."""
        if self.limit_bytes is None or growth <= 0:
            return
        measured_at, used = await self._recent(root_fd, key)
        if used + growth > self.limit_bytes:
            raise WorkspaceRefusal(
                f"the workspace is at its disk budget ({describe(used)} used of {describe(self.limit_bytes)}): "
                "remove files before writing more"
            )
        self._known[key] = (measured_at, used + growth)

    def over(self, used: int) -> bool:
        return self.limit_bytes is not None and used > self.limit_bytes
