"""A stored session as one read carries it: within the gRPC message limit, whatever it holds.

A session's UI messages are stored whole and read in one GetSession answer, which the gateway's
channel refuses past 8 MiB (RESOURCE_EXHAUSTED, an HTTP 429 that every later try repeated: the
conversation could not be opened again). Tool calls' inputs and outputs are bounded as the turn
records them (`turn/capability.py`), yet many of them, a long text or a session stored before
those bounds can still add up past it. A read of such a session shows the largest contents
replaced by a note saying so, largest first, until it fits; the stored row is left as it is.
"""

from __future__ import annotations

from typing import Any

import orjson

KIB = 1024
# The messages of one GetSession answer: 8 MiB less room for the session's other fields and its
# queued turns (each one a request body the gateway caps at its POPAGENT_MAX_BODY_BYTES).
MAX_READ_MESSAGES_BYTES = 6 * KIB * KIB
# The fields that grow with what a model or a tool produced, per part.
_HEAVY_FIELDS = ("input", "output", "errorText", "text", "data", "url")
# Contents smaller than this are left alone: replacing them gains less than the note costs.
_MIN_ELIDED_BYTES = 1 * KIB


def _note(size: int) -> str:
    return f"[{size // KIB} KiB not shown: this session is larger than one read carries]"


def readable_messages(messages_json: str, budget: int = MAX_READ_MESSAGES_BYTES) -> str:
    """`messages_json` when it fits `budget` bytes, else a copy with its largest contents elided."""
    if len(messages_json) <= budget // 4 or len(messages_json.encode()) <= budget:
        return messages_json
    messages = orjson.loads(messages_json)
    if not isinstance(messages, list):
        return messages_json
    total = len(messages_json.encode())
    heavy: list[tuple[int, dict[str, Any], str]] = []
    for message in messages:
        parts = message.get("parts") if isinstance(message, dict) else None
        for part in parts if isinstance(parts, list) else ():
            if not isinstance(part, dict):
                continue
            for field in _HEAVY_FIELDS:
                if field in part:
                    size = len(orjson.dumps(part[field]))
                    if size >= _MIN_ELIDED_BYTES:
                        heavy.append((size, part, field))
    heavy.sort(key=lambda entry: entry[0], reverse=True)
    for size, part, field in heavy:
        if total <= budget:
            break
        note = _note(size)
        # A tool part's input is an object in the AI SDK's shape; the others may be text.
        replacement: Any = {"omitted": note} if field == "input" else note
        part[field] = replacement
        total -= size - len(orjson.dumps(replacement))
    return orjson.dumps(messages).decode()
