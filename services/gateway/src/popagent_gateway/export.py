"""A session as a file to keep or share: Markdown for people, JSON for programs.

The JSON is the session as `GET /api/sessions/{id}` answers it. The Markdown is the conversation:
each message under a heading naming who said it, its text as written (the answers are Markdown
already), its files and sources as lines, and each tool call as its name, state and a bounded
copy of its input and output. Reasoning and the UI's own data parts (activity, hook timelines) are
left out: they are not the conversation.
"""

from __future__ import annotations

import re
import unicodedata
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import orjson

# A tool call's input or output is cut here: an export is for reading, the JSON export keeps all.
TOOL_DETAIL_CHARS = 2000
SPEAKERS = {"user": "User", "assistant": "popagent", "system": "System"}


def _fenced(value: Any) -> str:
    text = value if isinstance(value, str) else orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()
    if len(text) > TOOL_DETAIL_CHARS:
        text = f"{text[:TOOL_DETAIL_CHARS]}\n… ({len(text) - TOOL_DETAIL_CHARS} more characters)"
    # A fence longer than any backtick run inside, so no content can close it.
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text}\n{fence}"


def _tool(part: dict[str, Any]) -> str:
    name = part.get("toolName") if part["type"] == "dynamic-tool" else part["type"].removeprefix("tool-")
    lines = [f"**Tool `{name}`** ({part.get('state', 'unknown state')})"]
    if "input" in part:
        lines += ["", "Input:", "", _fenced(part["input"])]
    if part.get("errorText"):
        lines += ["", "Error:", "", _fenced(part["errorText"])]
    elif "output" in part:
        lines += ["", "Output:", "", _fenced(part["output"])]
    return "\n".join(lines)


def _part(part: dict[str, Any]) -> str | None:
    kind = part.get("type", "")
    if kind == "text":
        return str(part.get("text", "")).strip() or None
    if kind == "file":
        name = part.get("filename") or "file"
        return f"*Attached: {name} ({part.get('mediaType', 'unknown type')})*"
    if kind == "source-url":
        return f"*Source: [{part.get('title') or part.get('url')}]({part.get('url')})*"
    if kind == "dynamic-tool" or kind.startswith("tool-"):
        return _tool(part)
    return None  # reasoning, step-start, data-*: not the conversation


def markdown_of(session: dict[str, Any], now: datetime | None = None) -> str:
    """The session (as `GET /api/sessions/{id}` answers it) as a Markdown document."""
    exported = (now or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M UTC")
    blocks = [
        f"# {session.get('title') or 'Untitled chat'}",
        f"*Exported from popagent on {exported}. Session `{session['id']}` in workspace "
        f"`{session.get('workspaceId', '')}`, started {session.get('createdAt', '')}.*",
    ]
    for message in session.get("messages", []):
        parts = [text for text in map(_part, message.get("parts", [])) if text]
        if not parts:
            continue
        blocks.append(f"## {SPEAKERS.get(message.get('role', ''), message.get('role', ''))}")
        blocks.extend(parts)
    return "\n\n".join(blocks) + "\n"


def file_name(session: dict[str, Any], extension: str) -> str:
    """A file name from the title (ASCII letters, digits and hyphens), else from the session id."""
    ascii_title = unicodedata.normalize("NFKD", str(session.get("title", ""))).encode("ascii", "ignore").decode()
    slug = re.sub(r"[^a-z0-9]+", "-", ascii_title.lower()).strip("-")[:60].strip("-")
    return f"{slug or 'chat-' + re.sub(r'[^A-Za-z0-9-]+', '-', session['id'])[:60]}.{extension}"


def attachment(name: str) -> str:
    """A Content-Disposition that downloads as `name` (RFC 6266, with the UTF-8 form beside it)."""
    return f"attachment; filename=\"{name}\"; filename*=UTF-8''{quote(name)}"
