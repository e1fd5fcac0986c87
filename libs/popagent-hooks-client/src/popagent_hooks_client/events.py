"""The twelve lifecycle events and what each one allows (docs/hooks.md, Events).

One table drives configuration checks, dispatch and the caller-side fast path, so the
rules cannot drift apart.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from popagent.hooks.v1 import hooks_pb2


class Event(enum.StrEnum):
    """The event names, as they appear in `POPAGENT_HOOKS` and in requests to handlers."""

    SESSION_START = "SessionStart"
    TASK_START = "TaskStart"
    USER_PROMPT_SUBMIT = "UserPromptSubmit"
    SUBAGENT_START = "SubagentStart"
    PRE_TOOL_USE = "PreToolUse"
    POST_TOOL_USE = "PostToolUse"
    POST_TOOL_USE_FAILURE = "PostToolUseFailure"
    SUBAGENT_STOP = "SubagentStop"
    TASK_STOP = "TaskStop"
    STOP = "Stop"
    STOP_FAILURE = "StopFailure"
    SESSION_END = "SessionEnd"

    @property
    def rules(self) -> EventRules:
        return RULES[self]

    @property
    def proto(self) -> hooks_pb2.HookEvent:
        # The proto enum uses the same member names (PRE_TOOL_USE, ...).
        return getattr(hooks_pb2, self.name)

    @classmethod
    def from_proto(cls, value: int) -> Event:
        """The event of a proto enum value; ValueError for UNSPECIFIED or unknown values."""
        name = hooks_pb2.HookEvent.Name(value) if value in hooks_pb2.HookEvent.values() else ""
        if name not in cls.__members__:
            raise ValueError(f"unknown hook event {value}")
        return cls[name]


class Outcome(enum.StrEnum):
    PASS = "pass"
    DENY = "deny"
    MODIFY = "modify"
    CONTINUE = "continue"
    # PreToolUse only: the call needs a person's approval. Precedence deny > ask > allow.
    ASK = "ask"

    @property
    def proto(self) -> hooks_pb2.Outcome:
        return getattr(hooks_pb2, self.name)

    @classmethod
    def from_proto(cls, value: int) -> Outcome:
        return cls[hooks_pb2.Outcome.Name(value)]


class FailureClass(enum.StrEnum):
    """Why a handler produced no valid answer (audited, and returned as a decision's `failure_class`)."""

    TRANSPORT = "transport"
    TIMEOUT = "timeout"
    MALFORMED_RESPONSE = "malformed_response"
    EVENT_OUTCOME = "event_outcome"


class MatcherKind(enum.StrEnum):
    NONE = "none"
    TOOL = "tool"
    SPECIALIST = "specialist"


class Replacement(enum.StrEnum):
    """What a `modify` outcome carries, and where it lands in the next handler's `detail`."""

    NONE = "none"
    PROMPT = "prompt"
    ARGUMENTS = "arguments"


@dataclass(frozen=True)
class EventRules:
    allowed: frozenset[Outcome]
    matcher: MatcherKind
    replacement: Replacement

    @property
    def gate(self) -> bool:
        """Gate and mutation events fail closed by default; observational ones always fail open."""
        return self.allowed != {Outcome.PASS}

    @property
    def accepts_context(self) -> bool:
        """Only gate events feed `additionalContext` back into the turn; observers cannot add any."""
        return self.gate


_OBSERVE = frozenset({Outcome.PASS})
_GATE = frozenset({Outcome.PASS, Outcome.DENY, Outcome.MODIFY})
# Only a tool call can be put to a person for approval.
_TOOL_GATE = _GATE | {Outcome.ASK}

RULES: dict[Event, EventRules] = {
    Event.SESSION_START: EventRules(_OBSERVE, MatcherKind.NONE, Replacement.NONE),
    Event.TASK_START: EventRules(_OBSERVE, MatcherKind.NONE, Replacement.NONE),
    Event.USER_PROMPT_SUBMIT: EventRules(_GATE, MatcherKind.NONE, Replacement.PROMPT),
    Event.SUBAGENT_START: EventRules(_GATE, MatcherKind.SPECIALIST, Replacement.PROMPT),
    Event.PRE_TOOL_USE: EventRules(_TOOL_GATE, MatcherKind.TOOL, Replacement.ARGUMENTS),
    Event.POST_TOOL_USE: EventRules(_OBSERVE, MatcherKind.TOOL, Replacement.NONE),
    Event.POST_TOOL_USE_FAILURE: EventRules(_OBSERVE, MatcherKind.TOOL, Replacement.NONE),
    Event.SUBAGENT_STOP: EventRules(_OBSERVE, MatcherKind.SPECIALIST, Replacement.NONE),
    Event.TASK_STOP: EventRules(_OBSERVE, MatcherKind.NONE, Replacement.NONE),
    Event.STOP: EventRules(frozenset({Outcome.PASS, Outcome.CONTINUE}), MatcherKind.NONE, Replacement.NONE),
    Event.STOP_FAILURE: EventRules(_OBSERVE, MatcherKind.NONE, Replacement.NONE),
    Event.SESSION_END: EventRules(_OBSERVE, MatcherKind.NONE, Replacement.NONE),
}


def closed_outcome(event: Event) -> Outcome:
    """The decision a fail-closed failure produces: deny a gate, or refuse `Stop` completion."""
    return Outcome.CONTINUE if event is Event.STOP else Outcome.DENY


# `mcp__<server>__.*`: every tool of one of the users' MCP servers (Claude Code's matcher for a
# server; the only pattern a matcher takes, every other key is exact).
MCP_SERVER_MATCHER = re.compile(r"^mcp__[a-z][a-z0-9]*(?:_[a-z0-9]+)*__\.\*$")


def matcher_applies(keys: frozenset[str], target: str) -> bool:
    """Whether a handler with these matcher keys (empty or None-like: all) runs for `target`."""
    if not keys or target in keys:
        return True
    return target.startswith("mcp__") and any(
        key.endswith("__.*") and target.startswith(key[:-2]) for key in keys if MCP_SERVER_MATCHER.match(key)
    )
