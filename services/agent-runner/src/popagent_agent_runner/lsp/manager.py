"""The service's language servers, per workspace and language: started lazily, shared, bounded.

One `LanguageServers` is built at service start (`service.py`) and closed at stop, which
kills every server it started. Every server runs in the sandbox (`workspace/sandbox.py`), on
the repository's directory as the starting turn's descriptor holds it. A server is keyed by
workspace, repository directory (the directory itself, not its path) and language, so every
turn and every agent (supervisor and specialists alike) working in one workspace reaches the
same server: concurrent first calls wait for one start.

- Idle: a server nobody used for `idle_timeout_s` is shut down by the reaper; the next
  call starts it again.
- Crash: a server found dead at a call is discarded (its process group killed) and a new
  one is started for that call.
- Bound: at most `max_servers` run at once; starting one more shuts the least recently used
  idle one down first, and waits (up to the request deadline) when all are busy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from popagent_agent_runner.lsp.languages import Language, LanguageServerUnavailable, ServerCatalog
from popagent_agent_runner.workspace.paths import Repository
from popagent_agent_runner.workspace.sandbox import Sandbox

if TYPE_CHECKING:
    from popagent_agent_runner.lsp.session import ServerSession

logger = logging.getLogger(__name__)

Key = tuple[str, str, str]


@dataclass(frozen=True)
class RunningServer:
    workspace_id: str
    language: str
    pid: int | None
    idle_s: float


class LanguageServers:
    def __init__(
        self,
        catalog: ServerCatalog | None = None,
        *,
        sandbox: Sandbox | None = None,
        max_servers: int = 4,
        idle_timeout_s: float = 600.0,
        request_timeout_s: float = 30.0,
    ) -> None:
        self.catalog = catalog or ServerCatalog()
        # A sandbox of its own unless given one (closed with the servers only when its own).
        self.sandbox = sandbox if sandbox is not None else Sandbox()
        self._own_sandbox = sandbox is None
        self.max_servers = max_servers
        self.idle_timeout_s = idle_timeout_s
        self.request_timeout_s = request_timeout_s
        self.started = 0
        self._sessions: dict[Key, ServerSession] = {}
        self._starting: dict[Key, asyncio.Lock] = {}
        self._released = asyncio.Condition()
        self._reaper: asyncio.Task[None] | None = None
        self._closed = False

    def running(self) -> list[RunningServer]:
        now = time.monotonic()
        return [
            RunningServer(key[0], key[2], session.pid, now - session.last_used)
            for key, session in self._sessions.items()
            if session.alive
        ]

    @contextlib.asynccontextmanager
    async def session(self, workspace_id: str, repo: Repository, language: Language) -> AsyncIterator[ServerSession]:
        """The workspace's running server for `language` (started if needed), held for one call."""
        with repo.root_fd() as root_fd:
            directory = os.fstat(root_fd)
        # Keyed by the directory itself: a repository removed and cloned again at the same path
        # gets a server of its own (the old one, on the old directory, idles out).
        key = (workspace_id, f"{directory.st_dev}:{directory.st_ino}", language.name)
        session = await self._acquire(key, repo, language)
        try:
            yield session
        finally:
            session.in_use -= 1
            session.last_used = time.monotonic()
            async with self._released:
                self._released.notify_all()

    async def _acquire(self, key: Key, repo: Repository, language: Language) -> ServerSession:
        if self._closed:
            raise LanguageServerUnavailable("the service is stopping: no language server is started")
        lock = self._starting.setdefault(key, asyncio.Lock())
        async with lock:
            session = self._sessions.get(key)
            if session is not None and not session.alive:
                logger.warning(
                    "language server exited; starting it again",
                    extra={
                        "workspace": key[0],
                        "language": key[2],
                        "pid": session.pid,
                        "exit_code": session.exit_code,
                        "reason": session.exit_reason(),
                    },
                )
                del self._sessions[key]
                await session.close()
                session = None
            if session is None:
                # pygls and lsprotocol load with the first language server, not in every worker at start.
                from popagent_agent_runner.lsp.session import ServerSession

                await self._make_room()
                command = self.catalog.command(language)
                session = ServerSession(
                    language, repo.root, command, sandbox=self.sandbox, request_timeout_s=self.request_timeout_s
                )
                # Counted while it starts, so the bound holds for concurrent starts of other keys.
                self._sessions[key] = session
                session.in_use += 1
                try:
                    # The server's mount and the session's scans follow the directory this
                    # descriptor holds, not whatever the root's path leads to later.
                    with repo.root_fd() as root_fd:
                        await session.start(root_fd)
                except BaseException:
                    self._sessions.pop(key, None)
                    await session.close()
                    raise
                self.started += 1
                self._ensure_reaper()
                logger.info(
                    "language server started", extra={"workspace": key[0], "language": key[2], "pid": session.pid}
                )
            else:
                session.in_use += 1
            session.last_used = time.monotonic()
            return session

    async def _make_room(self) -> None:
        deadline = time.monotonic() + self.request_timeout_s
        while len(self._sessions) >= self.max_servers:
            idle = [(key, session) for key, session in self._sessions.items() if session.in_use == 0]
            if idle:
                key, session = min(idle, key=lambda pair: pair[1].last_used)
                del self._sessions[key]
                logger.info("language server stopped to make room", extra={"workspace": key[0], "language": key[2]})
                await session.close()
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise LanguageServerUnavailable(
                    f"{self.max_servers} language servers are busy (the most that run at once); try again shortly"
                )
            async with self._released:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._released.wait(), remaining)

    def _ensure_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.create_task(self._reap())

    async def _reap(self) -> None:
        period = max(0.05, min(self.idle_timeout_s / 4, 30.0))
        while self._sessions:
            await asyncio.sleep(period)
            now = time.monotonic()
            for key, session in list(self._sessions.items()):
                if session.in_use == 0 and (now - session.last_used >= self.idle_timeout_s or not session.alive):
                    if self._sessions.get(key) is session:
                        del self._sessions[key]
                    logger.info("idle language server stopped", extra={"workspace": key[0], "language": key[2]})
                    await session.close()

    async def close(self) -> None:
        """Every server is shut down (and its process group killed); no new one starts after this."""
        self._closed = True
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        sessions = list(self._sessions.values())
        self._sessions.clear()
        await asyncio.gather(*(session.close() for session in sessions), return_exceptions=True)
        if self._own_sandbox:
            await self.sandbox.close()
