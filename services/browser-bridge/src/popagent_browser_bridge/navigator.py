"""`bifrostNavigator` and `useBrowserSecret` below the tool boundary: access, tabs, scrubbing.

- Access is decided here, from the agent's persisted browser access the runner sends: the
  code-owned `OPERATION_ACCESS` table classifies each `browser_*` operation; one it does not
  know counts as interactive; code execution needs interactive access and the browser setting
  `allow_code_execution`.
- Arguments are validated against the live catalog's `input_schema` before the call (the server
  drops unknown keys silently, so a typo would otherwise do something else than asked).
- One tab per chat session: calls are serialized and each first selects its session's tab.
- Every result is scrubbed of every bound secret value (`scrub.py`) before it leaves; typing or
  filling a stored secret is refused: that is what `useBrowserSecret` is for.
- The global setting is checked before and after each call, so a PATCH that disables the browser
  refuses the calls in flight; a user's takeover pauses the agent's calls for that session.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import jsonschema
import jsonschema.exceptions
import jsonschema.protocols
import jsonschema.validators
from mcp import types

from popagent_browser_bridge.bifrost import BifrostClient
from popagent_browser_bridge.repo import BrowserSettings
from popagent_browser_bridge.scrub import Scrubber, SecretValues
from popagent_core.errors import FailedPrecondition, InvalidArgument, PermissionDenied, Unavailable

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
# The tab of a chat session is the bridge's to choose; listing tabs is harmless.
TAB_ACTIONS_ALLOWED = frozenset({"list"})
REF = re.compile(r"(?:f[0-9]{1,4})?e[0-9]{1,6}")
MAX_IMAGE_BYTES = 2 * 1024 * 1024
MAX_TEXT_CHARS = 200_000
TAB_LINE = re.compile(r"^- (\d+):", re.MULTILINE)
PAUSED = "paused: the user has taken over this browser session; try again after they release it"


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
    takeovers: set[str] = field(default_factory=set[str])
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Tab index -> owning chat session (None: not owned), for the MCP session of `_generation`.
    _tabs: list[str | None] | None = None
    _current: int | None = None
    _generation: int = -1
    _validators: dict[str, tuple[types.Tool, Any]] = field(default_factory=dict[str, tuple[types.Tool, Any]])

    def set_takeover(self, session_id: str, held: bool) -> None:
        if held:
            self.takeovers.add(session_id)
        else:
            self.takeovers.discard(session_id)

    def reset_tabs(self) -> None:
        self._tabs = None
        self._current = None

    @property
    def sessions(self) -> list[str]:
        if self._tabs is None or self._generation != self.client.generation:
            return []
        return [owner for owner in self._tabs if owner is not None]

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
        if operation == "browser_tabs" and arguments.get("action") not in TAB_ACTIONS_ALLOWED:
            raise PermissionDenied("each chat session has one browser tab of its own; browser_tabs may only list")
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
        return await self._call(session_id, operation, arguments, scrubber)

    async def _call(self, session_id: str, operation: str, arguments: dict[str, Any], scrubber: Scrubber) -> Outcome:
        if session_id in self.takeovers:
            raise FailedPrecondition(PAUSED)
        async with self._lock:
            self.gate.require()
            if session_id in self.takeovers:
                raise FailedPrecondition(PAUSED)
            await self._select_tab(session_id)
            result = await self.client.call(operation, arguments)
        # A PATCH that disabled the browser while this call ran: its answer is not delivered.
        self.gate.require()
        return _outcome(result, scrubber)

    async def _select_tab(self, session_id: str) -> None:
        if self._tabs is None or self._generation != self.client.generation:
            self._generation = self.client.generation
            listed = await self.client.call("browser_tabs", {"action": "list"})
            count = len(TAB_LINE.findall(_text_of(listed)))
            fresh: list[str | None] = [None] * count
            self._tabs = fresh
            self._current = next((i for i, line in enumerate(_tab_lines(listed)) if "(current)" in line), None)
        tabs = self._tabs
        assert tabs is not None
        if session_id in tabs:
            index = tabs.index(session_id)
        elif None in tabs:
            index = tabs.index(None)
            tabs[index] = session_id
        else:
            await self._checked("browser_tabs", {"action": "new"})
            tabs.append(session_id)
            self._current = len(tabs) - 1
            return
        if self._current != index:
            await self._checked("browser_tabs", {"action": "select", "index": index})
            self._current = index

    async def _checked(self, operation: str, arguments: dict[str, Any]) -> types.CallToolResult:
        result = await self.client.call(operation, arguments)
        if result.is_error:
            self.reset_tabs()
            raise Unavailable(f"the browser could not {operation} {arguments}: {_text_of(result)[:300]}")
        return result

    async def close_session(self, session_id: str) -> bool:
        """Close the tab of a chat session (the last tab is blanked instead, keeping the browser)."""
        async with self._lock:
            if self._tabs is None or self._generation != self.client.generation or session_id not in self._tabs:
                self.takeovers.discard(session_id)
                return False
            index = self._tabs.index(session_id)
            if len(self._tabs) == 1:
                await self._select_tab(session_id)
                await self.client.call("browser_navigate", {"url": "about:blank"})
                self._tabs[0] = None
            else:
                await self._checked("browser_tabs", {"action": "close", "index": index})
                del self._tabs[index]
                self._current = None
        self.takeovers.discard(session_id)
        return True

    async def screenshot(self, session_id: str) -> bytes:
        """The current page of a chat session's tab, as PNG (for the UI's screencast)."""
        self.gate.require()
        async with self._lock:
            if session_id not in self.sessions:
                raise FailedPrecondition(f"chat session {session_id} has no browser tab")
            await self._select_tab(session_id)
            result = await self.client.call("browser_take_screenshot", {"type": "png", "scale": "css"})
        for item in result.content:
            if isinstance(item, types.ImageContent):
                return base64.b64decode(item.data)
        raise Unavailable(f"the browser answered no image: {_text_of(result)[:300]}")

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
# one origin can never be filled into another.
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
  element.dispatchEvent(new Event("input", { bubbles: true }));
  element.dispatchEvent(new Event("change", { bubbles: true }));
  return { frame, top, filled: true };
}"""


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


def _tab_lines(result: types.CallToolResult) -> list[str]:
    return [line for line in _text_of(result).splitlines() if TAB_LINE.match(line)]


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


def _outcome(result: types.CallToolResult, scrubber: Scrubber) -> Outcome:
    parts: list[Part] = []
    for item in result.content:
        if isinstance(item, types.TextContent):
            parts.append(Part("text", text=scrubber.scrub(item.text[:MAX_TEXT_CHARS])))
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
