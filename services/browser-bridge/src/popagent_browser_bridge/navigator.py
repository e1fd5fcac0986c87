"""`bifrostNavigator` and `useBrowserSecret` below the tool boundary: access, tabs, scrubbing.

- Access is decided here, from the agent's persisted browser access the runner sends: the
  code-owned `OPERATION_ACCESS` table classifies each `browser_*` operation; one it does not
  know counts as interactive; code execution needs interactive access and the browser setting
  `allow_code_execution`.
- Arguments are validated against the live catalog's `input_schema` before the call (the server
  drops unknown keys silently, so a typo would otherwise do something else than asked).
- Each chat session has its own tabs (`tabs.py`): calls are serialized, each first selects the
  session's current tab, and the session sees, selects and closes only its own tabs and popups.
- Every result is scrubbed of every bound secret value (`scrub.py`) before it leaves; typing or
  filling a stored secret is refused: that is what `useBrowserSecret` is for.
- The global setting is checked before and after each call, so a PATCH that disables the browser
  refuses the calls in flight; a user's takeover pauses the agent's calls for that session.
- A session using a browser profile (`profiles.py`) gets that profile's navigator: its network
  policy refuses a navigation to a refused origin before the call, a guard in the browser context
  fails every request to one (each redirect leg, a page's resources and popups included) before it is sent, and a tab
  left on a refused origin is blanked after the call; the profile's browser state is saved after
  each call. Each operation the agent runs is recorded with a screenshot when a recorder is set.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import jsonschema
import jsonschema.exceptions
import jsonschema.protocols
import jsonschema.validators
from mcp import types

from popagent_browser_bridge.bifrost import BifrostClient
from popagent_browser_bridge.policy import OriginPolicy
from popagent_browser_bridge.repo import BrowserSettings, RecordingRepo, TabOwnerRepo, TakeoverRepo
from popagent_browser_bridge.scrub import Scrubber, SecretValues
from popagent_browser_bridge.tabs import (
    RELEASED,
    RUN_CODE,
    ServerTab,
    TabBook,
    listed_tabs,
    parse_tags,
    present,
    tags_function,
)
from popagent_core.errors import FailedPrecondition, InvalidArgument, NotFound, PermissionDenied, Unavailable

Access = Literal["read-only", "interactive", "code"]
ACCESS_RANK = {"none": 0, "read-only": 1, "interactive": 2}

OPERATION_ACCESS: dict[str, Access] = {
    "browser_navigate": "read-only",
    "browser_navigate_back": "read-only",
    "browser_snapshot": "read-only",
    "browser_take_screenshot": "read-only",
    "browser_find": "read-only",
    "browser_wait_for": "read-only",
    "browser_tabs": "read-only",
    "browser_console_messages": "read-only",
    "browser_network_requests": "read-only",
    "browser_network_request": "read-only",
    "browser_click": "interactive",
    "browser_type": "interactive",
    "browser_fill_form": "interactive",
    "browser_press_key": "interactive",
    "browser_select_option": "interactive",
    "browser_hover": "interactive",
    "browser_drag": "interactive",
    "browser_drop": "interactive",
    "browser_file_upload": "interactive",
    "browser_handle_dialog": "interactive",
    "browser_evaluate": "interactive",
    "browser_resize": "interactive",
    "browser_emulate_media": "interactive",
    "browser_close": "interactive",
    "browser_run_code_unsafe": "code",
}
REF = re.compile(r"(?:f[0-9]{1,4})?e[0-9]{1,6}")
MAX_IMAGE_BYTES = 2 * 1024 * 1024
MAX_TEXT_CHARS = 200_000
PAUSED = "paused: the user has taken over this browser session; try again after they release it"
# The page a result shows (`### Page` section of every result that touched one).
PAGE_URL = re.compile(r"^- Page URL: (\S+)", re.MULTILINE)
# A session whose tab went away (closed in the browser, or the browser server restarted without
# keeping its pages): what the screencast and the user's input are answered.
TAB_GONE = (
    "chat session {session_id} has no browser tab now: it was closed, or the browser restarted; "
    "the agent opens a new one at its next browser step"
)
NOT_HELD = "take over this browser session first: the user's input is only forwarded while they hold it"
# Keys the user may press on a held page: a printable character or one of the named keys.
KEY_NAME = re.compile(
    r"[^\x00-\x1f\x7f]|F[1-9]|F1[0-2]|Enter|Tab|Backspace|Delete|Escape|Space|Home|End|PageUp|PageDown"
    r"|Arrow(?:Up|Down|Left|Right)"
)
MAX_TYPED_CHARS = 4000
MAX_COORDINATE = 100_000.0
# Operations that only read what the tab shows: no recording frame of their own.
UNRECORDED = frozenset({"browser_snapshot", "browser_take_screenshot", "browser_console_messages"})


class ProfileState(Protocol):
    """Where a profile's browser state (Playwright storage state: cookies, local storage) is kept."""

    def read(self) -> dict[str, Any] | None: ...

    def write(self, state: dict[str, Any]) -> None: ...


def required_access(operation: str) -> Access:
    return OPERATION_ACCESS.get(operation, "interactive")


@dataclass(frozen=True, slots=True)
class Part:
    kind: Literal["text", "image", "resource"]
    text: str = ""
    mime_type: str = ""
    data: bytes = b""
    uri: str = ""


@dataclass(frozen=True, slots=True)
class Outcome:
    parts: list[Part]
    is_error: bool


@dataclass
class BrowserGate:
    """The global browser setting as this process last read or wrote it."""

    enabled: bool = False
    allow_code_execution: bool = False

    def apply(self, settings: BrowserSettings) -> None:
        self.enabled = settings.enabled
        self.allow_code_execution = settings.allow_code_execution

    def require(self) -> None:
        if not self.enabled:
            raise FailedPrecondition("the browser is disabled in browser settings")


@dataclass
class Navigator:
    client: BifrostClient
    secrets: SecretValues
    gate: BrowserGate
    # Where held takeovers are kept across restarts (None: in this process only).
    takeover_store: TakeoverRepo | None = None
    takeovers: set[str] = field(default_factory=set[str])
    # Where tab owners are kept by browser target id (None: on the pages only).
    tab_store: TabOwnerRepo | None = None
    _saved_owners: dict[str, str] = field(default_factory=dict[str, str])
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # The chat sessions' tabs in the MCP session of `_generation` (tabs.py).
    _book: TabBook | None = None
    _generation: int = -1
    _positional_ids: int = 0
    _validators: dict[str, tuple[types.Tool, Any]] = field(default_factory=dict[str, tuple[types.Tool, Any]])
    # The browser profile this navigator serves (None: the shared default context): its network
    # policy (replaced when the profile's policy changes) and its saved browser state.
    policy: OriginPolicy | None = None
    state: ProfileState | None = None
    # Each operation's frame (None: nothing is recorded).
    recordings: RecordingRepo | None = None
    _restored_generation: int = -1
    # The policy the browser context's request guard holds, and in which MCP session.
    _guarded: tuple[int, OriginPolicy] | None = None

    async def load_takeovers(self) -> None:
        if self.takeover_store is not None:
            self.takeovers = set(await self.takeover_store.held())

    async def set_takeover(self, session_id: str, held: bool) -> None:
        # Stored first: a takeover the database did not keep is not reported held.
        if self.takeover_store is not None:
            await self.takeover_store.set(session_id, held)
        if held:
            self.takeovers.add(session_id)
        else:
            self.takeovers.discard(session_id)

    def reset_tabs(self) -> None:
        self._book = None

    @property
    def sessions(self) -> list[str]:
        if self._book is None or self._generation != self.client.generation:
            return []
        return self._book.sessions()

    async def list_sessions(self) -> list[str]:
        """The chat sessions with tabs, read from the browser when this process has not yet (a
        restarted bridge finds the owners stored on the pages of a browser that outlived it)."""
        # Never waits for a reconnect: the UI polls this while the browser may be down.
        if self.client.health().reachable and (self._book is None or self._generation != self.client.generation):
            with contextlib.suppress(Unavailable):
                async with self._lock:
                    await self._tab_book()
        return self.sessions

    def _validator(self, tool: types.Tool) -> jsonschema.protocols.Validator:
        """One checked validator per catalog entry (a refreshed catalog brings new Tool objects)."""
        cached = self._validators.get(tool.name)
        if cached is not None and cached[0] is tool:
            return cached[1]
        cls = jsonschema.validators.validator_for(tool.input_schema)
        try:
            cls.check_schema(tool.input_schema)
        except jsonschema.SchemaError:
            raise Unavailable(f"the browser's schema of {tool.name} is invalid") from None
        validator = cls(tool.input_schema)
        self._validators[tool.name] = (tool, validator)
        return validator

    def operations(self) -> list[types.Tool]:
        return sorted(self.client.tools.values(), key=lambda tool: tool.name)

    async def navigate(self, session_id: str, access: str, operation: str, arguments: dict[str, Any]) -> Outcome:
        self.gate.require()
        if ACCESS_RANK.get(access, 0) == 0:
            raise PermissionDenied("this agent has no browser access")
        needed = required_access(operation)
        if needed == "code":
            if not self.gate.allow_code_execution:
                raise PermissionDenied(
                    f"{operation} runs arbitrary code and browser settings do not allow code execution"
                )
            needed = "interactive"
        if ACCESS_RANK[needed] > ACCESS_RANK.get(access, 0):
            raise PermissionDenied(f"{operation} needs interactive browser access; this agent's access is {access}")
        await self.client.session()
        tool = self.client.tools.get(operation)
        if tool is None:
            names = ", ".join(sorted(self.client.tools)) or "none"
            raise InvalidArgument(f"unknown browser operation {operation!r}; the browser offers: {names}")
        error = jsonschema.exceptions.best_match(self._validator(tool).iter_errors(arguments))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "arguments"
            raise InvalidArgument(f"{operation} {where}: {error.message}")
        scrubber = await self.secrets.scrubber()
        if operation in ("browser_type", "browser_fill_form") and any(
            value in scrubber.values for value in _typed_texts(operation, arguments)
        ):
            raise PermissionDenied("that text is a stored secret: use useBrowserSecret to fill it")
        target = _requested_url(operation, arguments)
        refusal = self.policy.refusal(target) if self.policy is not None and target is not None else None
        if refusal is not None:
            raise PermissionDenied(refusal)
        return await self._call(session_id, operation, arguments, scrubber, record=operation not in UNRECORDED)

    async def _call(
        self,
        session_id: str,
        operation: str,
        arguments: dict[str, Any],
        scrubber: Scrubber,
        *,
        record: bool = False,
    ) -> Outcome:
        if session_id in self.takeovers:
            raise FailedPrecondition(PAUSED)
        async with self._lock:
            self.gate.require()
            if session_id in self.takeovers:
                raise FailedPrecondition(PAUSED)
            if self.policy is not None:
                await self._guard_requests(self.policy)
            if operation == "browser_tabs":
                result = await self._tabs(session_id, arguments)
            elif operation == "browser_close":
                # The server's browser_close ends the whole browser context, every session's tabs
                # with it: for a chat session, "close the browser" closes its own tabs.
                closed = await self._close_own(session_id)
                result = types.CallToolResult(
                    content=[
                        types.TextContent(type="text", text=f"### Result\nClosed {closed} tab(s) of this session.")
                    ]
                )
            else:
                await self._focus(session_id)
                result = await self.client.call(operation, arguments)
                await self._observe(operation, result, session_id)
            result = await self._enforce_policy(result)
            if self.state is not None:
                await self._save_state()
            if record and self.recordings is not None:
                await self._record(session_id, operation, arguments, result, scrubber)
            book = self._book
        # A PATCH that disabled the browser while this call ran: its answer is not delivered.
        self.gate.require()
        if book is None:
            return _outcome(result, scrubber)
        return _outcome(result, scrubber, lambda text: present(operation, text, book, session_id))

    # -- tabs -----------------------------------------------------------------------------------

    async def _tab_book(self) -> TabBook:
        if self._book is None or self._generation != self.client.generation:
            self._generation = self.client.generation
            self._book = None
            await self._sync(initial=True)
            if self.state is not None and self._restored_generation != self.client.generation:
                await self._restore_state()
                self._restored_generation = self.client.generation
        assert self._book is not None
        return self._book

    # -- profiles: policy, state, recording ----------------------------------------------------

    async def _enforce_policy(self, result: types.CallToolResult) -> types.CallToolResult:
        """When the guard stopped a request (a redirect leg, a link to a refused origin) or the page
        the call left is on a refused origin, the tab is blanked and the agent is told why instead
        of being shown the page."""
        if self.policy is None:
            return result
        text = _text_of(result)
        landed: list[str] = PAGE_URL.findall(text)
        # A navigation the guard stopped answers an error, or (a click) leaves Chromium's error page.
        error_page = [url for url in landed if url.startswith(ERROR_PAGE)]
        stopped = await self._stopped_requests() if BLOCKED_BY_GUARD in text or error_page else []
        if stopped:
            landed = [url for url in landed if url not in error_page]
        reasons = list(dict.fromkeys(r for url in [*stopped, *landed] if (r := self.policy.refusal(url)) is not None))
        if not reasons:
            return result
        await self._checked("browser_navigate", {"url": "about:blank"})
        how = "the browser never sent the request" if stopped else "the page went there"
        return types.CallToolResult(
            content=[
                types.TextContent(
                    type="text", text=f"### Error\nStopped: {'; '.join(reasons)} ({how}). The tab was blanked."
                )
            ],
            is_error=True,
        )

    async def _stopped_requests(self) -> list[str]:
        """The URLs the request guard stopped since it was last asked (the list is emptied)."""
        answer = await self._run_code_answer(STOPPED_REQUESTS)
        try:
            urls = json.loads(answer) if isinstance(answer, str) else None
        except ValueError:
            urls = None
        return [url for url in urls if isinstance(url, str)] if isinstance(urls, list) else []

    async def _guard_requests(self, policy: OriginPolicy) -> None:
        """Have the context fail every document request (each redirect leg included) to an origin
        the policy refuses, before it leaves the browser; set again when the policy changes."""
        await self._tab_book()
        if self._guarded == (self.client.generation, policy):
            return
        rules = {"allowed": sorted(policy.allowed), "blocked": sorted(policy.blocked)}
        answer = await self._run_code_answer(GUARD_REQUESTS.replace("__POLICY__", json.dumps(rules)))
        if answer != "guarded":
            raise Unavailable(f"the browser did not set the network policy's request guard: {str(answer)[:200]}")
        self._guarded = (self.client.generation, policy)

    async def _run_code_answer(self, code: str) -> Any:
        if RUN_CODE not in self.client.tools:
            raise Unavailable(f"browser profiles need a browser server that offers {RUN_CODE}")
        answer = _result_json(_outcome(await self._checked(RUN_CODE, {"code": code}), Scrubber(frozenset())))
        return answer

    async def _restore_state(self) -> None:
        """Put the profile's saved state into the fresh browser context of its MCP session."""
        assert self.state is not None
        saved = self.state.read()
        if saved is not None:
            await self._run_code_answer(RESTORE_STATE.replace("__STATE__", json.dumps(saved)))

    async def _save_state(self) -> None:
        assert self.state is not None
        answer = await self._run_code_answer(SAVE_STATE)
        try:
            state = json.loads(answer) if isinstance(answer, str) else None
        except ValueError:
            state = None
        if not isinstance(state, dict):
            raise Unavailable("the browser answered no storage state to the bridge")
        self.state.write(state)

    async def _record(
        self,
        session_id: str,
        operation: str,
        arguments: dict[str, Any],
        result: types.CallToolResult,
        scrubber: Scrubber,
    ) -> None:
        """One frame: the session's page after the operation, with the operation and its scrubbed arguments."""
        assert self.recordings is not None
        book = self._book
        if book is None or book.server_current is None:
            return
        shown = next((t for t in book.tabs if t.id == book.server_current), None)
        if shown is None or shown.owner != session_id:
            return
        shot = await self.client.call("browser_take_screenshot", {"type": "png", "scale": "css"})
        png = next((base64.b64decode(i.data) for i in shot.content if isinstance(i, types.ImageContent)), None)
        if png is None:
            return
        await self.recordings.add(
            session_id, operation, scrubber.scrub(json.dumps(arguments)), bool(result.is_error), png
        )

    async def _sync(
        self,
        claim: str | None = None,
        *,
        holder: str = RELEASED,
        initial: bool = False,
        appeared_for: str | None = None,
    ) -> TabBook:
        """Read the server's tabs and their owners (giving the current one to `claim`)."""
        if RUN_CODE in self.client.tools:
            known = await self.tab_store.owners() if initial and self.tab_store is not None else {}
            code = tags_function(claim, holder=holder, initial=initial, known=known)
            parsed = parse_tags(_text_of(await self._checked(RUN_CODE, {"code": code})))
            if parsed is None:
                self.reset_tabs()
                raise Unavailable("the browser answered no tab list to the bridge's tab check")
            tabs, current = parsed
            if initial:
                # What is stored is what this browser had: rows of pages gone meanwhile are deleted.
                self._saved_owners = dict(known)
            await self._save_owners(tabs)
        else:
            tabs, current = await self._positional(claim, holder, appeared_for)
        if self._book is None:
            self._book = TabBook(tabs, current)
        else:
            self._book.replace(tabs, current)
        return self._book

    async def _save_owners(self, tabs: list[ServerTab]) -> None:
        """Store what changed of the owners by target id (a database write only when it did)."""
        if self.tab_store is None:
            return
        owners = {tab.target: tab.owner for tab in tabs if tab.target and tab.owner}
        if owners == self._saved_owners:
            return
        gone = [target for target in self._saved_owners if target not in owners]
        changed = {t: o for t, o in owners.items() if self._saved_owners.get(t) != o}
        await self.tab_store.save(changed, gone)
        self._saved_owners = owners

    async def _positional(
        self, claim: str | None, holder: str, appeared_for: str | None
    ) -> tuple[list[ServerTab], str | None]:
        listed = await self._checked("browser_tabs", {"action": "list"})
        count, current_index = listed_tabs("browser_tabs", _text_of(listed)) or (0, None)
        old = self._book.tabs if self._book is not None else None

        def fresh(owner: str | None) -> ServerTab:
            self._positional_ids += 1
            return ServerTab(f"p{self._positional_ids}", owner)

        if old is None:
            tabs = [fresh(RELEASED) for _ in range(count)]
        elif count >= len(old):
            tabs = old + [fresh(appeared_for) for _ in range(count - len(old))]
        else:
            # Which tab went away cannot be told by position: nobody keeps any.
            tabs = [fresh(None) for _ in range(count)]
        if claim is not None and current_index is not None and current_index < len(tabs):
            held = tabs[current_index]
            if held.owner in (RELEASED, holder) or (old is not None and current_index >= len(old)):
                tabs[current_index] = ServerTab(held.id, claim)
        current = tabs[current_index].id if current_index is not None and current_index < len(tabs) else None
        return tabs, current

    async def _observe(self, operation: str, result: types.CallToolResult, session_id: str) -> None:
        """Re-read the owners when a result's tab list is not what the bridge expects (a popup,
        a page that closed itself); else note the server's current tab."""
        book = self._book
        listed = listed_tabs(operation, _text_of(result))
        if book is None or listed is None:
            return
        count, current_index = listed
        if count != len(book.tabs):
            await self._sync(appeared_for=session_id)
        elif current_index is not None:
            book.server_current = book.tabs[current_index].id

    async def _select(self, tab: ServerTab) -> None:
        book = await self._tab_book()
        for attempt in range(2):
            index = book.index(tab.id)
            if index is None:
                book.current.pop(tab.owner or "", None)
                raise NotFound(TAB_GONE.format(session_id=tab.owner))
            result = await self._checked("browser_tabs", {"action": "select", "index": index})
            listed = listed_tabs("browser_tabs", _text_of(result))
            if listed is not None and listed[0] == len(book.tabs):
                book.server_current = tab.id
                return
            # The list moved under the bridge (a popup, a page that closed itself): read it again.
            if attempt == 0:
                await self._sync()
        self.reset_tabs()
        raise Unavailable("the browser's tabs kept changing while the bridge selected this session's tab")

    async def _focus(self, session_id: str) -> ServerTab:
        """Make the session's current tab the server's current one, giving it one if it has none."""
        book = await self._tab_book()
        tab = book.current_of(session_id)
        if tab is None:
            spare = next((t for t in book.tabs if t.owner == RELEASED), None)
            if spare is not None:
                if book.server_current != spare.id:
                    await self._select(spare)
            else:
                await self._checked("browser_tabs", {"action": "new"})
                book.server_current = None
            book = await self._sync(claim=session_id, appeared_for=None)
            tab = self._take_server_current(book, session_id, "the browser did not give this session a tab of its own")
        elif book.server_current != tab.id:
            await self._select(tab)
        return tab

    def _take_server_current(self, book: TabBook, session_id: str, failure: str) -> ServerTab:
        """The server's current tab as the session's current one, once a sync gave it to the session;
        when it did not, the book is dropped (re-read next time) and `failure` is Unavailable."""
        tab = next((t for t in book.tabs if t.id == book.server_current), None)
        if tab is None or tab.owner != session_id:
            self.reset_tabs()
            raise Unavailable(f"{failure}; try again")
        book.current[session_id] = tab.id
        return tab

    def _own_index(self, book: TabBook, session_id: str, value: Any) -> ServerTab:
        own = book.owned(session_id)
        if not isinstance(value, int | float) or isinstance(value, bool) or value != int(value):
            raise InvalidArgument("browser_tabs index must be a whole number")
        if not 0 <= int(value) < len(own):
            raise InvalidArgument(f"tab {int(value)} is not one of this session's {len(own)} tab(s)")
        return own[int(value)]

    async def _tabs(self, session_id: str, arguments: dict[str, Any]) -> types.CallToolResult:
        """browser_tabs within the session's own tabs, in the session's own numbering."""
        action = arguments.get("action")
        book = await self._tab_book()
        if action == "new":
            url = arguments.get("url")
            result = await self.client.call("browser_tabs", {"action": "new", **({"url": url} if url else {})})
            book = await self._sync(claim=session_id, appeared_for=session_id)
            self._take_server_current(book, session_id, "the browser did not open a tab for this session")
            return result
        if action == "select":
            if "index" not in arguments:
                raise InvalidArgument("browser_tabs select needs the index of one of this session's tabs")
            tab = self._own_index(book, session_id, arguments["index"])
            await self._select(tab)
            book.current[session_id] = tab.id
            result = await self._checked("browser_tabs", {"action": "list"})
            await self._observe("browser_tabs", result, session_id)
            return result
        if action == "close":
            if "index" in arguments:
                tab = self._own_index(book, session_id, arguments["index"])
            else:
                current = book.current_of(session_id)
                if current is None:
                    raise InvalidArgument("this session has no tab to close")
                tab = current
            own = book.owned(session_id)
            position = own.index(tab)
            await self._close_tab(tab)
            rest = book.owned(session_id)
            if book.current.get(session_id) == tab.id and rest:
                book.current[session_id] = rest[min(position, len(rest) - 1)].id
            result = await self._checked("browser_tabs", {"action": "list"})
            await self._observe("browser_tabs", result, session_id)
            return result
        await self._focus(session_id)
        result = await self._checked("browser_tabs", {"action": "list"})
        await self._observe("browser_tabs", result, session_id)
        return result

    async def _close_tab(self, tab: ServerTab) -> None:
        """Close one tab; the browser's last tab is blanked and released instead, so the browser
        itself stays open for the other sessions."""
        book = await self._tab_book()
        index = book.index(tab.id)
        if index is None:
            return
        if len(book.tabs) == 1:
            if book.server_current != tab.id:
                await self._select(tab)
            await self._checked("browser_navigate", {"url": "about:blank"})
            await self._sync(claim=RELEASED, holder=tab.owner or RELEASED)
            return
        result = await self._checked("browser_tabs", {"action": "close", "index": index})
        del book.tabs[index]
        if book.server_current == tab.id:
            book.server_current = book.tabs[min(index, len(book.tabs) - 1)].id
        listed = listed_tabs("browser_tabs", _text_of(result))
        if listed is not None and listed[0] != len(book.tabs):
            await self._sync()
        else:
            await self._save_owners(book.tabs)
        for session_id in list(book.current):
            book.current_of(session_id)

    async def _close_own(self, session_id: str) -> int:
        book = await self._tab_book()
        own = book.owned(session_id)
        for tab in reversed(own):
            await self._close_tab(tab)
        book.current.pop(session_id, None)
        return len(own)

    async def _checked(self, operation: str, arguments: dict[str, Any]) -> types.CallToolResult:
        result = await self.client.call(operation, arguments)
        if result.is_error:
            self.reset_tabs()
            raise Unavailable(f"the browser could not {operation} {arguments}: {_text_of(result)[:300]}")
        return result

    async def close_session(self, session_id: str) -> bool:
        """Close every tab of a chat session (its popups included)."""
        async with self._lock:
            if self._book is None or self._generation != self.client.generation or not self._book.owned(session_id):
                await self.set_takeover(session_id, False)
                return False
            await self._close_own(session_id)
        await self.set_takeover(session_id, False)
        return True

    async def screenshot(self, session_id: str) -> bytes:
        """The current page of a chat session's tab, as PNG (for the UI's screencast)."""
        self.gate.require()
        async with self._lock:
            if session_id not in self.sessions:
                raise NotFound(TAB_GONE.format(session_id=session_id))
            await self._focus(session_id)
            result = await self.client.call("browser_take_screenshot", {"type": "png", "scale": "css"})
        for item in result.content:
            if isinstance(item, types.ImageContent):
                return base64.b64decode(item.data)
        raise Unavailable(f"the browser answered no image: {_text_of(result)[:300]}")

    async def interact(self, session_id: str, user_input: UserInput) -> None:
        """The user's own click, text or key on the session's page, while they hold it (takeover):
        the agent's calls are paused then, so the page is theirs. The bridge writes the code that
        runs (the input is data in it), under the profile's network policy as the agent's calls are."""
        self.gate.require()
        code = USER_INPUT.replace("__INPUT__", json.dumps(user_input.as_json()))
        async with self._lock:
            if session_id not in self.takeovers:
                raise FailedPrecondition(NOT_HELD)
            if session_id not in self.sessions:
                raise NotFound(TAB_GONE.format(session_id=session_id))
            if RUN_CODE not in self.client.tools:
                raise FailedPrecondition(f"the browser server does not offer {RUN_CODE}, which forwarding input needs")
            if self.policy is not None:
                await self._guard_requests(self.policy)
            await self._focus(session_id)
            result = await self._checked(RUN_CODE, {"code": code})
            if user_input.click is not None:
                # A click may open a popup: it is this session's.
                await self._sync(appeared_for=session_id)
            await self._enforce_policy(result)
            if self.state is not None:
                await self._save_state()

    async def use_secret(
        self, session_id: str, access: str, resource_id: str, name: str, element: str
    ) -> tuple[str, bool]:
        """Fill `element` (a snapshot ref) with the secret when both its frame origin and its top
        page origin equal a bound origin, in one evaluate call. Returns (origin, success)."""
        self.gate.require()
        if ACCESS_RANK.get(access, 0) < ACCESS_RANK["interactive"]:
            raise PermissionDenied(
                f"useBrowserSecret needs interactive browser access; this agent's access is {access}"
            )
        if not REF.fullmatch(element):
            raise InvalidArgument("element must be a ref from the latest browser_snapshot (such as e5 or f1e3)")
        origins, values = await self.secrets.resolve(resource_id, name)
        if not origins:
            raise FailedPrecondition(f"secret {name!r} is not bound to any origin")
        known = await self.secrets.scrubber()
        scrubber = Scrubber(known.values | frozenset(values.values()))
        function = FILL_FUNCTION.replace("__VALUES__", json.dumps(values))
        outcome = await self._call(session_id, "browser_evaluate", {"target": element, "function": function}, scrubber)
        del function, values
        answer = _result_json(outcome)
        if outcome.is_error or not isinstance(answer, dict):
            return "", False
        frame, top, filled = answer.get("frame"), answer.get("top"), answer.get("filled") is True
        origin = frame if isinstance(frame, str) else ""
        return (origin, filled and frame == top and frame in origins)


# Runs in the element's own frame. Fills only when the frame's origin and the top page's origin
# are the same bound origin; the value is read from the map by that origin, so a value bound to
# one origin can never be filled into another. The filled element is masked in the page (the
# screenshot tool has no mask option).
FILL_FUNCTION = """(element) => {
  const values = __VALUES__;
  const frame = window.origin;
  const ancestors = location.ancestorOrigins;
  const top = window === window.top ? window.origin
    : (ancestors && ancestors.length ? ancestors[ancestors.length - 1] : null);
  if (frame !== top || !Object.prototype.hasOwnProperty.call(values, frame)) {
    return { frame, top, filled: false };
  }
  const isArea = element instanceof HTMLTextAreaElement;
  if (!isArea && !(element instanceof HTMLInputElement)) return { frame, top, filled: false };
  const proto = isArea ? HTMLTextAreaElement.prototype : HTMLInputElement.prototype;
  Object.getOwnPropertyDescriptor(proto, "value").set.call(element, values[frame]);
  // Screenshots are pixels no scrubber reaches: the filled field shows discs, as a password
  // field does, whatever its type is or becomes (a "show password" toggle).
  element.style.setProperty("-webkit-text-security", "disc", "important");
  element.dispatchEvent(new Event("input", { bubbles: true }));
  element.dispatchEvent(new Event("change", { bubbles: true }));
  return { frame, top, filled: true };
}"""


@dataclass(frozen=True, slots=True)
class UserInput:
    """One input of the user on a held page: a click at CSS pixels of the viewport, text, or a key."""

    click: tuple[float, float] | None = None
    text: str | None = None
    key: str | None = None

    def __post_init__(self) -> None:
        given = [v for v in (self.click, self.text, self.key) if v is not None]
        if len(given) != 1:
            raise InvalidArgument("give exactly one of a click, text or a key")
        if self.click is not None and not all(0 <= c <= MAX_COORDINATE for c in self.click):
            raise InvalidArgument(f"a click's x and y are CSS pixels from 0 to {MAX_COORDINATE:.0f}")
        if self.text is not None and not 0 < len(self.text) <= MAX_TYPED_CHARS:
            raise InvalidArgument(f"typed text must be 1 to {MAX_TYPED_CHARS} characters")
        if self.key is not None and not KEY_NAME.fullmatch(self.key):
            raise InvalidArgument(f"unknown key {self.key[:40]!r}: a character, or Enter, Tab, Backspace, an arrow…")

    def as_json(self) -> dict[str, Any]:
        if self.click is not None:
            return {"click": {"x": self.click[0], "y": self.click[1]}}
        return {"text": self.text} if self.text is not None else {"key": self.key}


# The user's input on the page (the bridge's code; the input is JSON data in it).
USER_INPUT = """async (page) => {
  const input = __INPUT__;
  if (input.click) await page.mouse.click(input.click.x, input.click.y);
  else if (input.text !== undefined) await page.keyboard.type(input.text);
  else await page.keyboard.press(input.key === " " ? "Space" : input.key);
  return "done";
}"""


# The profile's saved state into a fresh context: cookies at once; local storage by an init script
# that fills each saved origin's items on that origin's pages (as Playwright's storageState does).
RESTORE_STATE = """async (page) => {
  const state = __STATE__;
  const context = page.context();
  if (Array.isArray(state.cookies) && state.cookies.length) await context.addCookies(state.cookies);
  const origins = Array.isArray(state.origins) ? state.origins : [];
  if (origins.length) {
    await context.addInitScript((saved) => {
      for (const entry of saved) {
        if (entry.origin !== window.origin || !Array.isArray(entry.localStorage)) continue;
        for (const item of entry.localStorage) {
          if (window.localStorage.getItem(item.name) === null) window.localStorage.setItem(item.name, item.value);
        }
      }
    }, origins);
  }
  return "restored";
}"""
SAVE_STATE = """async (page) => JSON.stringify(await page.context().storageState())"""
STOPPED_REQUESTS = """async (page) => {
  const context = page.context();
  const stopped = context.__popagentStopped || [];
  context.__popagentStopped = [];
  return JSON.stringify(stopped);
}"""
# What a navigation the request guard stopped answers.
BLOCKED_BY_GUARD = "ERR_BLOCKED_BY_CLIENT"
ERROR_PAGE = "chrome-error:"
# The network policy inside the browser: each page of the context (those opened later too) gets a
# CDP session pausing every request (documents, frames, images, scripts, fetches) at the request
# stage, where Chromium reports each redirect leg as a request of its own; one to a refused origin
# fails with ERR_BLOCKED_BY_CLIENT before it is sent. A context route refuses the same: Playwright's
# routes never see redirect legs, but they are in place before a popup's first request, which can
# leave before the popup is announced and gets its CDP session. Only documents refused are reported
# to the agent (a page's blocked image is not its navigation failing). The same rule as policy.py;
# the context keeps the current rules, so a policy change replaces them for pages already guarded.
GUARD_REQUESTS = """async (page) => {
  const context = page.context();
  context.__popagentPolicy = __POLICY__;
  const refused = (href) => {
    if (href === "about:blank") return false;
    const rules = context.__popagentPolicy;
    let url;
    try { url = new URL(href); } catch { return rules.allowed.length > 0; }
    if (url.protocol !== "http:" && url.protocol !== "https:") return rules.allowed.length > 0;
    const origin = url.origin;
    if (rules.blocked.includes(origin)) return true;
    return rules.allowed.length > 0 && !rules.allowed.includes(origin);
  };
  const guard = async (p) => {
    if (p.__popagentGuard) return;
    p.__popagentGuard = true;
    const cdp = await context.newCDPSession(p);
    cdp.on("Fetch.requestPaused", (event) => {
      const stop = refused(event.request.url);
      if (stop && event.resourceType === "Document") {
        const stopped = (context.__popagentStopped = context.__popagentStopped || []);
        if (stopped.length < 20) stopped.push(event.request.url);
      }
      const reply = stop
        ? cdp.send("Fetch.failRequest", { requestId: event.requestId, errorReason: "BlockedByClient" })
        : cdp.send("Fetch.continueRequest", { requestId: event.requestId });
      reply.catch(() => {});
    });
    await cdp.send("Fetch.enable", { patterns: [{ urlPattern: "*", requestStage: "Request" }] });
  };
  if (!context.__popagentGuarding) {
    context.__popagentGuarding = true;
    context.on("page", (p) => { guard(p).catch(() => {}); });
    // A popup's first request can leave before its page is announced (and guarded); the
    // context's routes are in place before any page of it sends anything.
    await context.route("**/*", (route) => {
      const request = route.request();
      if (!refused(request.url())) return route.fallback();
      if (request.isNavigationRequest()) {
        const stopped = (context.__popagentStopped = context.__popagentStopped || []);
        if (stopped.length < 20) stopped.push(request.url());
      }
      return route.abort("blockedbyclient");
    });
  }
  for (const p of context.pages()) await guard(p);
  return "guarded";
}"""


def _requested_url(operation: str, arguments: dict[str, Any]) -> str | None:
    """The URL an operation asks the browser to load, if it names one."""
    url = arguments.get("url")
    if not isinstance(url, str):
        return None
    if operation == "browser_navigate" or (operation == "browser_tabs" and arguments.get("action") == "new"):
        return url
    return None


def _typed_texts(operation: str, arguments: dict[str, Any]) -> Iterable[str]:
    if operation == "browser_type":
        text = arguments.get("text")
        if isinstance(text, str):
            yield text
    else:
        for entry in arguments.get("fields") or ():
            if isinstance(entry, dict) and isinstance(entry.get("value"), str):
                yield entry["value"]


def _text_of(result: types.CallToolResult) -> str:
    return "\n".join(item.text for item in result.content if isinstance(item, types.TextContent))


def _result_json(outcome: Outcome) -> Any:
    text = "\n".join(part.text for part in outcome.parts if part.kind == "text")
    _, marker, rest = text.partition("### Result")
    if not marker:
        return None
    body = rest.strip().split("\n###", 1)[0].strip()
    try:
        return json.loads(body)
    except ValueError:
        return None


def _outcome(result: types.CallToolResult, scrubber: Scrubber, shown: Callable[[str], str] | None = None) -> Outcome:
    parts: list[Part] = []
    for item in result.content:
        if isinstance(item, types.TextContent):
            text = shown(item.text) if shown is not None else item.text
            parts.append(Part("text", text=scrubber.scrub(text[:MAX_TEXT_CHARS])))
        elif isinstance(item, types.ImageContent):
            data = base64.b64decode(item.data)
            if len(data) > MAX_IMAGE_BYTES:
                parts.append(Part("text", text=f"[image of {len(data)} bytes left out: over {MAX_IMAGE_BYTES} bytes]"))
            else:
                parts.append(Part("image", mime_type=item.mime_type, data=data))
        elif isinstance(item, types.EmbeddedResource):
            resource = item.resource
            text = getattr(resource, "text", None)
            blob = getattr(resource, "blob", None)
            body = text if isinstance(text, str) else (blob if isinstance(blob, str) else "")
            parts.append(
                Part(
                    "resource",
                    text=scrubber.scrub(body[:MAX_TEXT_CHARS]),
                    mime_type=resource.mime_type or "",
                    uri=scrubber.scrub(str(resource.uri)),
                )
            )
        elif isinstance(item, types.ResourceLink):
            parts.append(Part("resource", uri=scrubber.scrub(str(item.uri)), mime_type=item.mime_type or ""))
    return Outcome(parts, bool(result.is_error))
