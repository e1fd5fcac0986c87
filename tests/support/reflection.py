"""Scripted answers of the evolution loop's reflection model, for the scripted model server.

Reflection's request carries the agent and its claimed signals as JSON in the user prompt's
`<signals>` data block; `reflection_responder` answers it with a JSON proposal chosen by a test's `choose`, and
passes every other request (chat turns) to `otherwise`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from support.model_gateway import Body, Turn

REFLECTION_MARK = "You review failures of one AI agent"


@dataclass(frozen=True)
class ReflectionRequest:
    agent_id: str
    signals: list[dict[str, Any]]
    # The whole user prompt (the agent, its recent outcome rate, the signals' data block).
    prompt: str = ""

    @property
    def ids(self) -> list[str]:
        return [s["id"] for s in self.signals]


def is_reflection(body: Body) -> bool:
    return any(REFLECTION_MARK in str(m.get("content", "")) for m in body.get("messages", []))


def parse(body: Body) -> ReflectionRequest:
    prompt = next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user")
    agent_id = prompt.split("Agent: ", 1)[1].split("\n", 1)[0].strip()
    cases = prompt.split("\n<signals>\n", 1)[1].rsplit("\n</signals>", 1)[0]
    return ReflectionRequest(agent_id, json.loads(cases), prompt)


def proposal(*selections: tuple[str, list[str]], **extra: Any) -> str:
    """The JSON proposal of `selections` (strategy, cited ids), each with the `extra` fields (a lesson, or
    fields the schema has no place for)."""
    chosen = [{"strategy": strategy, "signal_ids": ids, **extra} for strategy, ids in selections]
    return json.dumps({"selections": chosen})


Choose = Callable[[ReflectionRequest], str]


def reflection_responder(choose: Choose, seen: list[ReflectionRequest] | None = None) -> Callable[[Body], Turn]:
    def respond(body: Body) -> Turn:
        if not is_reflection(body):
            return Turn.fail(400, "model gateway: no scripted turn left for this request")
        request = parse(body)
        if seen is not None:
            seen.append(request)
        return Turn.say(choose(request))

    return respond
