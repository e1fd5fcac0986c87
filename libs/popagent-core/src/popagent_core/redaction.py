"""The one redaction of secret-bearing tool payloads (docs/hooks.md, Redaction).

- The retired plaintext tools `storeSecret`, `recallSecret` and `updateSecret` have
  every payload (arguments, result, error) replaced by the literal `[redacted]`.
- `useBrowserSecret` payloads keep only metadata: the credential name and browser
  element reference before use, and name / origin / success after use. The plaintext
  is resolved below the tool and hook boundaries and never appears here.

Hook dispatch applies it to every tool event; chat ingress, session/thread persistence
and transcript rendering use the same function, which is why it lives in the kernel.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

REDACTED = "[redacted]"
RETIRED_SECRET_TOOLS = frozenset({"storeSecret", "recallSecret", "updateSecret"})
BROWSER_SECRET_TOOL = "useBrowserSecret"
# What may be shown of a useBrowserSecret call, before use (arguments) and after (result).
BROWSER_SECRET_INPUT_KEYS = ("name", "element", "ref")
BROWSER_SECRET_OUTPUT_KEYS = ("name", "origin", "success")

Phase = Literal["input", "output", "error"]


def redact_tool_payload(tool_name: str, payload: Any, phase: Phase) -> Any:
    """The payload of one tool call as it may leave the tool boundary.

    `phase` is "input" for arguments, "output" for a successful result and "error" for a
    failure message. Payloads of other tools are returned unchanged (same object).
    """
    if tool_name in RETIRED_SECRET_TOOLS:
        return REDACTED
    if tool_name != BROWSER_SECRET_TOOL:
        return payload
    if phase == "error":
        # A failure message may quote what was typed; only the fact of failure is kept.
        return REDACTED
    keys = BROWSER_SECRET_INPUT_KEYS if phase == "input" else BROWSER_SECRET_OUTPUT_KEYS
    if not isinstance(payload, Mapping):
        return REDACTED
    return {key: payload[key] for key in keys if key in payload and _is_scalar(payload[key])}


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, bool, int, float))


# Where each tool event carries its payloads in the hook `detail`.
_DETAIL_PHASES: tuple[tuple[str, Phase], ...] = (("arguments", "input"), ("result", "output"), ("error", "error"))


def redact_tool_detail(tool_name: str, detail: dict[str, Any]) -> dict[str, Any]:
    """A tool event's `detail` with each payload field redacted; a new dict only when something changed."""
    if tool_name not in RETIRED_SECRET_TOOLS and tool_name != BROWSER_SECRET_TOOL:
        return detail
    redacted = dict(detail)
    for key, phase in _DETAIL_PHASES:
        if key in redacted:
            redacted[key] = redact_tool_payload(tool_name, redacted[key], phase)
    return redacted


def redact_ui_message(message: dict[str, Any]) -> dict[str, Any]:
    """A UI message with the payloads of secret-bearing tool parts redacted."""
    parts = message.get("parts")
    if not isinstance(parts, list):
        return message
    redacted: list[Any] = []
    for part in parts:
        kind = part.get("type", "") if isinstance(part, dict) else ""
        tool = kind.removeprefix("tool-") if isinstance(kind, str) and kind.startswith("tool-") else ""
        if tool:
            part = dict(part)
            for key, phase in (("input", "input"), ("output", "output"), ("errorText", "error")):
                if key in part:
                    part[key] = redact_tool_payload(tool, part[key], phase)  # type: ignore[arg-type]
        redacted.append(part)
    return {**message, "parts": redacted}
