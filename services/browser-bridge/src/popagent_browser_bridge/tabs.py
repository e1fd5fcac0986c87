"""Each chat session's own tabs inside the one browser the MCP session holds.

The server numbers its tabs 0..n-1 in opening order (a new tab or a popup is appended; a closed
one is spliced out) and has one current tab for everybody. The bridge keeps the same list, each
entry owned by one chat session, and shows a session only its own tabs, numbered 0..k-1 in the
same order, with that session's own current tab; it maps those numbers to the server's before a
call and rewrites every tab list the server answers ("### Open tabs", `browser_tabs` results).

Ownership is kept on the page objects in the server process itself, through
`browser_run_code_unsafe` (the bridge's own fixed snippet, not agent code): a tab the bridge opens
or hands to a session is tagged with that session, and a popup a page opens (window.open,
target=_blank, rel=noopener included) takes the tag of its opener (`page.opener()`). So a popup
belongs to the session whose page opened it even when it opened on a timer while another
session's call ran. Tags are only read when the server's tab count is not what the bridge
expects: the steady state costs no extra call. Page objects belong to one MCP connection, so the
owners are also stored by the page's browser target id (popagent_browser_tab_owners): a bridge
restarted against a browser that outlived its MCP session gives each session its tabs back.

A server without `browser_run_code_unsafe` gets positional tracking: tabs appearing during a
session's call are that session's, and a count the bridge cannot explain makes every tab
nobody's (sessions get fresh tabs rather than risk seeing another session's).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

TAB_LINE = re.compile(r"^- (\d+):( \(current\))?(.*)$")
NO_TABS = "No open tabs. Navigate to a URL to create one."
RUN_CODE = "browser_run_code_unsafe"

# Released (`""`): a blank tab any session may take; orphan (`None`): a page nobody can be shown
# (one that appeared with no tagged opener after the bridge first looked).
RELEASED = ""


@dataclass(frozen=True, slots=True)
class ServerTab:
    id: str
    owner: str | None
    # The browser's own id of the page (None: unknown), under which its owner is stored.
    target: str | None = None


@dataclass
class TabBook:
    """The server's tabs of one MCP session, in the server's order."""

    tabs: list[ServerTab]
    server_current: str | None
    current: dict[str, str] = field(default_factory=dict[str, str])

    def index(self, tab_id: str) -> int | None:
        return next((i for i, tab in enumerate(self.tabs) if tab.id == tab_id), None)

    def owned(self, session_id: str) -> list[ServerTab]:
        return [tab for tab in self.tabs if tab.owner == session_id]

    def sessions(self) -> list[str]:
        seen: dict[str, None] = {}
        for tab in self.tabs:
            if tab.owner:
                seen[tab.owner] = None
        return list(seen)

    def current_of(self, session_id: str) -> ServerTab | None:
        """The session's current tab; when it was closed, its first remaining one."""
        own = self.owned(session_id)
        chosen = self.current.get(session_id)
        tab = next((t for t in own if t.id == chosen), own[0] if own else None)
        if tab is None:
            self.current.pop(session_id, None)
        else:
            self.current[session_id] = tab.id
        return tab

    def replace(self, tabs: list[ServerTab], server_current: str | None) -> None:
        self.tabs = tabs
        self.server_current = server_current
        for session_id in list(self.current):
            self.current_of(session_id)


def tags_function(
    claim: str | None, *, holder: str = RELEASED, initial: bool = False, known: dict[str, str] | None = None
) -> str:
    """The snippet that gives the current page to `claim` (when given, and only when it is
    untagged or held by `holder`) and answers every page's tag in the server's order, tagging
    untagged pages first: from `known` (owners stored by browser target id, for a browser that
    outlived the bridge's MCP session), else from their opener."""
    return (
        TAGS_FUNCTION.replace("__CLAIM__", "undefined" if claim is None else json.dumps(claim))
        .replace("__HOLDER__", json.dumps(holder))
        .replace("__INITIAL__", "true" if initial else "false")
        .replace("__KNOWN__", json.dumps(known or {}))
    )


# Page objects are per MCP connection; a page's target id (Chromium's, through a CDP session) is
# the browser's own and outlives the connection. Without CDP (another engine) it is null.
TAGS_FUNCTION = """async (page) => {
  const key = "__popagentTab";
  const context = page.context();
  const known = __KNOWN__;
  const fresh = () => "t" + (context.__popagentNextTab = (context.__popagentNextTab || 0) + 1);
  const targetOf = async (p) => {
    try {
      const cdp = await context.newCDPSession(p);
      try {
        return (await cdp.send("Target.getTargetInfo")).targetInfo.targetId;
      } finally {
        await cdp.detach().catch(() => {});
      }
    } catch {
      return null;
    }
  };
  const claim = __CLAIM__;
  const held = page[key];
  if (claim !== undefined && (!held || held.owner === "" || held.owner === __HOLDER__)) {
    const target = held ? held.target : await targetOf(page);
    page[key] = { id: (held && held.id) || fresh(), owner: claim, target };
  }
  const pages = context.pages();
  const out = [];
  for (const p of pages) {
    if (!p[key]) {
      const target = await targetOf(p);
      let owner;
      if (target && Object.prototype.hasOwnProperty.call(known, target)) {
        owner = known[target];
      } else {
        const opener = await p.opener();
        const from = opener && opener[key] ? opener[key].owner : undefined;
        owner = from ? from : (opener || !__INITIAL__ ? null : "");
      }
      p[key] = { id: fresh(), owner, target };
    }
    out.push({ id: p[key].id, owner: p[key].owner, target: p[key].target, current: p === page });
  }
  return out;
}"""


def parse_tags(text: str) -> tuple[list[ServerTab], str | None] | None:
    """The snippet's answer: the tabs and the server's current tab id."""
    _, marker, rest = text.partition("### Result")
    if not marker:
        return None
    try:
        listed: Any = json.loads(rest.strip().split("\n###", 1)[0].strip())
    except ValueError:
        return None
    if not isinstance(listed, list):
        return None
    tabs: list[ServerTab] = []
    current: str | None = None
    for entry in listed:
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
            return None
        owner, target = entry.get("owner"), entry.get("target")
        tabs.append(
            ServerTab(
                entry["id"], owner if isinstance(owner, str) else None, target if isinstance(target, str) else None
            )
        )
        if entry.get("current") is True:
            current = entry["id"]
    return tabs, current


def sections(text: str) -> list[tuple[str, str]]:
    """(title, body) of each `### ` section; text before the first one has the title ""."""
    parts = re.split(r"^### ", text, flags=re.MULTILINE)
    found = [("", parts[0])] if parts[0] else []
    for part in parts[1:]:
        title, _, body = part.partition("\n")
        found.append((title.strip(), body))
    return found


def listed_tabs(operation: str, text: str) -> tuple[int, int | None] | None:
    """(count, current server index) of the tab list a result carries, if it carries one."""
    if "### " not in text:
        return None
    found = sections(text)
    titles = {title for title, _ in found}
    for title, body in found:
        if title == "Open tabs" or (title == "Result" and operation == "browser_tabs"):
            lines = [TAB_LINE.match(line) for line in body.splitlines()]
            matched = [m for m in lines if m]
            if title == "Result" and not matched and NO_TABS in body:
                return 0, None
            current = next((int(m.group(1)) for m in matched if m.group(2)), None)
            return len(matched), current
    # One tab: the server prints its Page section without the list.
    if "Page" in titles:
        return 1, 0
    return None


def present(operation: str, text: str, book: TabBook, session_id: str) -> str:
    """The result as the session may see it: only its own tabs, in its own numbering."""
    if "### " not in text or ("### Open tabs" not in text and operation != "browser_tabs"):
        return text
    own = book.owned(session_id)
    local = {book.index(tab.id): i for i, tab in enumerate(own)}
    current = book.current.get(session_id)
    out: list[str] = []
    for title, body in sections(text):
        is_list = title == "Open tabs" or (title == "Result" and operation == "browser_tabs")
        if not is_list:
            out.append(f"### {title}\n{body}" if title else body)
            continue
        lines: list[str] = []
        for line in body.splitlines():
            match = TAB_LINE.match(line)
            if match is None:
                continue
            server_index = int(match.group(1))
            mine = local.get(server_index)
            if mine is None:
                continue
            marker = " (current)" if own[mine].id == current else ""
            lines.append(f"- {mine}:{marker}{match.group(3)}")
        if title == "Open tabs" and len(lines) <= 1:
            continue
        rendered = "\n".join(lines) if lines else NO_TABS
        out.append(f"### {title}\n{rendered}\n")
    joined = "".join(part if part.endswith("\n") else part + "\n" for part in out)
    return joined if text.endswith("\n") else joined.rstrip("\n")
