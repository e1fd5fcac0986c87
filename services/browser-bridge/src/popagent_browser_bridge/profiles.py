"""Named browser profiles: which navigator serves each chat session.

A session without a profile uses the default navigator (the bridge's long-lived MCP session and
its browser context, shared by every such session, each with its own tabs). A session using a
profile gets that profile's own navigator: an MCP session of its own on the same socket, opened
when the session first needs the browser and closed when the session's tabs are closed, its
profile released or the session deleted. A server that gives each MCP session its own browser
context (`@playwright/mcp --isolated` does) so keeps a profile's cookies and storage apart from
every other session's.

A profile's state lives in its own directory under `POPAGENT_BROWSER_PROFILES_DIR` (mode 0700):
`storage-state.json` (mode 0600), Playwright's storage state (cookies, local storage), written
after every operation of the profile's session and put back into the fresh context of the next
MCP session. One chat session at a time uses a profile (the table's unique key); a profile in
use cannot be deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from popagent_browser_bridge.bifrost import BifrostClient
from popagent_browser_bridge.navigator import Navigator
from popagent_browser_bridge.policy import OriginPolicy, normalize_origins
from popagent_browser_bridge.repo import BrowserProfile, ProfileRepo, RecordingRepo
from popagent_core.errors import Conflict, FailedPrecondition, InvalidArgument

logger = logging.getLogger(__name__)

NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
STATE_FILE = "storage-state.json"


def check_name(name: str) -> str:
    if not NAME.fullmatch(name):
        raise InvalidArgument(
            "a browser profile name is 1-63 lower-case letters, digits, '-' or '_', starting with a letter or digit"
        )
    return name


def policy_of(profile: BrowserProfile) -> OriginPolicy:
    return OriginPolicy(profile.name, frozenset(profile.allowed_origins), frozenset(profile.blocked_origins))


@dataclass(frozen=True, slots=True)
class ProfileFolder:
    """A profile's directory and its saved browser state."""

    path: Path

    def read(self) -> dict[str, Any] | None:
        try:
            value = json.loads((self.path / STATE_FILE).read_text())
        except FileNotFoundError:
            return None
        except ValueError:
            logger.warning("browser profile state unreadable; starting empty", extra={"path": str(self.path)})
            return None
        return value if isinstance(value, dict) else None

    def write(self, state: dict[str, Any]) -> None:
        # Cookies are credentials: readable by this user only, replaced whole (never half written).
        self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
        partial = self.path / f".{STATE_FILE}.partial"
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(state, out)
        partial.replace(self.path / STATE_FILE)


@dataclass
class Browsers:
    default: Navigator
    repo: ProfileRepo
    recordings: RecordingRepo
    profiles_dir: Path | None
    # A new MCP client on the bridge's socket, for one profile's own MCP session.
    new_client: Callable[[], BifrostClient]
    # session id -> profile name, as stored.
    bindings: dict[str, str] = field(default_factory=dict[str, str])
    # profile name -> its navigator and the task holding its MCP session.
    active: dict[str, tuple[Navigator, asyncio.Task[None]]] = field(
        default_factory=dict[str, tuple[Navigator, "asyncio.Task[None]"]]
    )
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def load(self) -> None:
        self.bindings = await self.repo.session_profiles()

    def folder(self, name: str) -> ProfileFolder:
        if self.profiles_dir is None:
            raise FailedPrecondition("browser profiles need POPAGENT_BROWSER_PROFILES_DIR, which is not set")
        return ProfileFolder(self.profiles_dir / check_name(name))

    # -- profiles ------------------------------------------------------------------------------

    async def create(self, name: str, allowed: list[str], blocked: list[str]) -> BrowserProfile:
        folder = self.folder(name)
        profile = await self.repo.create(
            name,
            list(normalize_origins(allowed, "allowedOrigins")),
            list(normalize_origins(blocked, "blockedOrigins")),
        )
        # A directory left by a profile of the same name deleted before is not this profile's.
        shutil.rmtree(folder.path, ignore_errors=True)
        folder.path.mkdir(mode=0o700, parents=True)
        return profile

    async def update_policy(self, name: str, allowed: list[str], blocked: list[str]) -> BrowserProfile:
        profile = await self.repo.update_policy(
            check_name(name),
            list(normalize_origins(allowed, "allowedOrigins")),
            list(normalize_origins(blocked, "blockedOrigins")),
        )
        running = self.active.get(name)
        if running is not None:
            running[0].policy = policy_of(profile)
        return profile

    async def delete(self, name: str) -> None:
        folder = self.folder(name)
        await self.repo.delete_unused(name)
        shutil.rmtree(folder.path, ignore_errors=True)

    # -- sessions ------------------------------------------------------------------------------

    async def navigator_for(self, session_id: str) -> Navigator:
        """The session's navigator, opening its profile's MCP session when it has none open."""
        name = self.bindings.get(session_id)
        if name is None:
            return self.default
        async with self._lock:
            running = self.active.get(name)
            if running is not None:
                return running[0]
            profile = await self.repo.get(name)
            client = self.new_client()
            navigator = Navigator(
                client,
                self.default.secrets,
                self.default.gate,
                # The one set of held takeovers, whichever navigator serves the session.
                takeovers=self.default.takeovers,
                policy=policy_of(profile),
                state=self.folder(name),
                recordings=self.recordings,
            )
            task = asyncio.create_task(client.run(), name=f"browser-profile-{name}")
            self.active[name] = (navigator, task)
            return navigator

    def open_navigator(self, session_id: str) -> Navigator | None:
        """The navigator serving the session now, without opening one (None: its profile's is not open)."""
        name = self.bindings.get(session_id)
        if name is None:
            return self.default
        running = self.active.get(name)
        return running[0] if running is not None else None

    async def _stop(self, name: str) -> None:
        running = self.active.pop(name, None)
        if running is None:
            return
        running[1].cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running[1]

    async def close(self) -> None:
        for name in list(self.active):
            await self._stop(name)

    async def choose(self, session_id: str, name: str) -> None:
        """Give the session `name` (empty: release its profile). Refused while the session has tabs."""
        if name:
            check_name(name)
        current = self.bindings.get(session_id)
        if (current or "") == name:
            return
        serving = self.open_navigator(session_id)
        if serving is not None and session_id in await serving.list_sessions():
            raise Conflict(f"chat session {session_id} has browser tabs open; close them before changing its profile")
        if name:
            await self.repo.choose(session_id, name)
            self.bindings[session_id] = name
        else:
            await self.repo.release(session_id)
            self.bindings.pop(session_id, None)
        if current is not None:
            await self._stop(current)

    async def list_sessions(self) -> list[str]:
        sessions = dict.fromkeys(await self.default.list_sessions())
        for navigator, _ in list(self.active.values()):
            sessions.update(dict.fromkeys(navigator.sessions))
        return list(sessions)

    async def close_session(self, session_id: str, *, deleted: bool) -> bool:
        """Close the session's tabs; a profile's MCP session closes with them (its state is saved
        after every operation). A deleted session's recording and profile choice go too."""
        navigator = self.open_navigator(session_id)
        closed = await navigator.close_session(session_id) if navigator is not None else False
        # Held takeovers are stored by the default navigator, whichever navigator served the session.
        await self.default.set_takeover(session_id, False)
        name = self.bindings.get(session_id)
        if name is not None:
            await self._stop(name)
        if deleted:
            await self.recordings.delete(session_id)
            if name is not None:
                await self.repo.release(session_id)
                self.bindings.pop(session_id, None)
        return closed
