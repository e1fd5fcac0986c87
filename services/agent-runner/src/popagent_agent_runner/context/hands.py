"""The service's hands (workspace root and sandbox) and what one turn holds of them.

`Hands` is built once at start. Each turn gets `TurnHands` for its session's (or task's)
workspace: the repository resolved under `POPAGENT_WORKSPACE_ROOT` (by components, links
resolved; a registration that now points outside, or whose directory vanished, gives every
tool a clear error) and opened then, its directory held for the whole turn, and the
background processes its agents started. Both are released when the turn ends, whether
answered, failed or cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from popagent_agent_runner.state.workspaces import contained_path
from popagent_agent_runner.workspace.paths import Repository, WorkspaceRefusal
from popagent_agent_runner.workspace.sandbox import DEFAULT_TIMEOUT_S, MAX_TIMEOUT_S, Sandbox, SandboxProcess
from popagent_core.errors import InvalidArgument

if TYPE_CHECKING:
    from popagent_agent_runner.lsp.manager import LanguageServers

# Background processes one turn may keep at once.
MAX_BACKGROUND_PROCESSES = 8


@dataclass
class Hands:
    workspace_root: Path
    sandbox: Sandbox
    # Used only where no settings snapshot gives one (benchmarks).
    command_timeout_s: float = DEFAULT_TIMEOUT_S
    # The service's language servers (mastra_workspace_lsp_inspect); None: no code inspection.
    lsp: LanguageServers | None = None
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def for_turn(
        self, workspace_id: str, registered_path: str | None, command_timeout_s: float | None = None
    ) -> TurnHands:
        """The turn's hands; `command_timeout_s` is the turn's settings snapshot's (None: this default)."""
        timeout = command_timeout_s if command_timeout_s is not None else self.command_timeout_s
        if registered_path is None:
            return TurnHands(self, workspace_id, None, f"the workspace {workspace_id!r} is not registered", timeout)
        try:
            _, real = contained_path(self.workspace_root, registered_path)
        except InvalidArgument as exc:
            return TurnHands(self, workspace_id, None, f"the workspace {workspace_id!r} cannot be used: {exc}", timeout)
        try:
            repository = Repository(real, workspace_id)
        except WorkspaceRefusal as exc:
            return TurnHands(self, workspace_id, None, str(exc), timeout)
        return TurnHands(self, workspace_id, repository, "", timeout)

    def next_process_id(self) -> str:
        return f"proc-{next(self._ids)}"


@dataclass
class TurnHands:
    hands: Hands
    workspace_id: str
    repository: Repository | None
    problem: str = ""
    command_timeout_s: float = DEFAULT_TIMEOUT_S
    processes: dict[str, SandboxProcess] = field(default_factory=dict[str, SandboxProcess])
    _watchdogs: list[asyncio.Task[object]] = field(default_factory=list[asyncio.Task[object]])
    _closed: bool = False

    @property
    def sandbox(self) -> Sandbox:
        return self.hands.sandbox

    def repo(self) -> Repository:
        if self.repository is None:
            raise WorkspaceRefusal(self.problem)
        return self.repository

    def timeout(self, requested_s: float | None) -> float:
        """A command's timeout: the configured default, at most `MAX_TIMEOUT_S`."""
        if requested_s is None or requested_s <= 0:
            return min(self.command_timeout_s, MAX_TIMEOUT_S)
        return min(requested_s, MAX_TIMEOUT_S)

    def keep(self, process: SandboxProcess, timeout_s: float) -> str:
        running = sum(1 for kept in self.processes.values() if kept.running)
        if running >= MAX_BACKGROUND_PROCESSES:
            process.kill()
            raise WorkspaceRefusal(
                f"{running} background processes are already running in this turn; "
                "kill one with mastra_workspace_kill_process first"
            )
        process_id = self.hands.next_process_id()
        self.processes[process_id] = process
        # The timeout holds for background commands too.
        self._watchdogs.append(asyncio.create_task(process.wait(timeout_s), name=f"sandbox-watchdog-{process_id}"))
        return process_id

    def process(self, process_id: str) -> SandboxProcess:
        found = self.processes.get(process_id)
        if found is None:
            known = ", ".join(self.processes) or "none"
            raise WorkspaceRefusal(f"no background process {process_id!r} in this turn (started here: {known})")
        return found

    async def close(self) -> None:
        """Kill every process the turn started and release its repository (the turn ended or
        was cancelled). Tasks and specialists share the turn's hands: only the first call acts."""
        if self._closed:
            return
        self._closed = True
        try:
            for process in self.processes.values():
                process.kill()
            for watchdog in self._watchdogs:
                with contextlib.suppress(BaseException):
                    await asyncio.shield(watchdog)
        finally:
            if self.repository is not None:
                self.repository.close()
