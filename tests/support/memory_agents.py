"""The scripted model's answers to the Observer and the Reflector (observational memory), as
structured output: the `final_result` tool call pydantic-ai's tool output mode expects.

    gw.responder = memory_agents(chat=lambda body: Turn.say("ok"))

A request whose instructions are the Observer's gets one high-priority observation per user line of
the history it was given (`User said: <text>`, with `referred_date` when the line names a day as
YYYY-MM-DD), a medium one per tool result; the Reflector's gets the log's lines back deduplicated,
without the oldest half of the low- and medium-priority ones and the oldest third of the others. Anything else goes to `chat`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from support.model_gateway import Body, ToolCall, Turn

OBSERVER_MARK = "You are the memory of an AI assistant."
REFLECTOR_MARK = "You maintain the long-term observation log of an AI assistant."

_USER = re.compile(r"^\[(\d+)\] User \([^)]*\): (.*)$")
_TOOL = re.compile(r"^\[(\d+)\] Tool result (\S+): (.*)$")
_DAY = re.compile(r"\b(\d{4}-\d{2}-\d{2})\b")
_HEADER = re.compile(r"^Date: (\w{3}) (\d{1,2}), (\d{4})$")
_LINE = re.compile(r"^\* (\S+) (?:\(\d\d:\d\d\) )?(.*?)(?: \(refers to [^)]*\))?$")
_MONTHS = {
    m: i
    for i, m in enumerate(["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"], start=1)
}
_PRIORITY = {"🔴": "high", "🟡": "medium", "🟢": "low", "✅": "completed"}


def _system_text(body: Body) -> str:
    return "\n".join(
        str(m.get("content")) for m in body.get("messages", []) if m.get("role") in ("system", "developer")
    )


def _user_text(body: Body) -> str:
    texts: list[str] = []
    for message in body.get("messages", []):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts.extend(str(item.get("text", "")) for item in content if isinstance(item, dict))
    return "\n".join(texts)


def is_observer(body: Body) -> bool:
    return OBSERVER_MARK in _system_text(body)


def is_reflector(body: Body) -> bool:
    return REFLECTOR_MARK in _system_text(body)


def observe(body: Body) -> Turn:
    history = _user_text(body).split("## New message history to observe", 1)[-1]
    observations: list[dict[str, Any]] = []
    for line in history.splitlines():
        if user := _USER.match(line):
            item: dict[str, Any] = {"priority": "high", "text": f"User said: {user[2][:160]}", "message": int(user[1])}
            if day := _DAY.search(user[2]):
                item["referred_date"] = day[1]
            observations.append(item)
        elif tool := _TOOL.match(line):
            observations.append(
                {"priority": "medium", "text": f"{tool[2]} gave {tool[3][:80]}", "message": int(tool[1])}
            )
    return Turn.call(ToolCall("final_result", {"observations": observations}))


def reflect(body: Body) -> Turn:
    log = _user_text(body).split("## Observations to condense", 1)[-1]
    day = "2026-01-01"
    lines: list[dict[str, Any]] = []
    seen: set[str] = set()
    for line in log.splitlines():
        if header := _HEADER.match(line.strip()):
            day = f"{header[3]}-{_MONTHS[header[1]]:02d}-{int(header[2]):02d}"
        elif (entry := _LINE.match(line.strip())) and entry[2] not in seen:
            seen.add(entry[2])
            lines.append({"priority": _PRIORITY.get(entry[1], "low"), "text": entry[2], "observed_on": day})
    minor = [item for item in lines if item["priority"] in ("low", "medium")]
    major = [item for item in lines if item["priority"] not in ("low", "medium")]
    dropped = {id(item) for item in [*minor[: len(minor) // 2], *major[: len(major) // 3]]}
    kept = [item for item in lines if id(item) not in dropped]
    return Turn.call(ToolCall("final_result", {"observations": kept}))


def memory_agents(chat: Callable[[Body], Turn] | None = None) -> Callable[[Body], Turn]:
    """A responder answering the Observer and the Reflector, and everything else with `chat` (default: "ok")."""

    def respond(body: Body) -> Turn:
        if is_observer(body):
            return observe(body)
        if is_reflector(body):
            return reflect(body)
        return chat(body) if chat is not None else Turn.say("ok")

    return respond
