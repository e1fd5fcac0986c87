"""How far a chat turn got, stored at each tool step so another runner can go on with it
(docs/turns.md, Takeover).

Written before a step's tool calls run (`in_flight`: the last message is the response whose calls
are running) and again once their results are in. A runner that takes the turn over goes on from
there: the model responses and tool results stored are not redone, and calls that were in flight
are reported to the model as interrupted rather than run again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter

from popagent_agent_runner.turn.ui_message import UserMessage

# A tool call whose runner died while it ran: it may or may not have taken effect.
INTERRUPTED_TOOL_TEXT = (
    "This tool call was interrupted: the agent-runner running it stopped before its result was stored, "
    "so it may or may not have taken effect. Check before calling it again if that matters."
)


@dataclass(frozen=True)
class TurnProgress:
    # The prompt as its gate let it through (a hook may have rewritten its text).
    prompt: UserMessage
    # What this turn alone adds to the supervisor's instructions (recalled memories, a hook's context).
    instructions: str | None
    # The supervisor's messages of this turn so far, its prompt first.
    messages: list[ModelMessage]
    # The assistant UI message's parts so far.
    ui_parts: list[dict[str, Any]]
    # The last message is a response whose tool calls were running.
    in_flight: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "prompt": self.prompt.ui,
            "instructions": self.instructions,
            "messages": ModelMessagesTypeAdapter.dump_python(self.messages, mode="json"),
            "ui": self.ui_parts,
            "inFlight": self.in_flight,
        }

    @classmethod
    def from_json(cls, stored: dict[str, Any]) -> TurnProgress:
        return cls(
            prompt=UserMessage.parse(orjson.dumps(stored["prompt"]).decode()),
            instructions=stored.get("instructions"),
            messages=ModelMessagesTypeAdapter.validate_python(stored["messages"]),
            ui_parts=list(stored["ui"]),
            in_flight=bool(stored["inFlight"]),
        )
