"""What a request carries of a thread, and in which order: the observations block, the raw messages
with their gap markers, the context-window guard's marker, and the turn's own parts.

The observations block is rendered from stored entries only, so it is byte-identical between turns
until the log changes.

`lay_out()` orders the request for the longest byte-stable prefix (a provider's prompt cache stops at
the first byte that differs from the previous request): the agent's own instructions, then the
observations block (both system messages), then the raw messages, and only after them what changes
from turn to turn — the prompt's gap marker and the turn's parts (recalled memories, a hook's added
context) — then the prompt. A turn's request therefore begins with everything the previous one sent
but its own trailing parts, until an observation changes the block.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic_ai.messages import ModelMessage, ModelRequest, UserPromptPart

from popagent_agent_runner.memory.observational.policy import request_budget
from popagent_agent_runner.memory.observational.store import MemorySettings, ThreadView
from popagent_agent_runner.memory.observational.tokens import PART_OVERHEAD, Calibration, count_messages, count_text

# Gap markers between messages at least this far apart (temporal_markers).
TEMPORAL_GAP = dt.timedelta(minutes=10)

PREAMBLE = (
    "The observations below are your memory of the earlier part of this conversation (the messages "
    "themselves are no longer shown). Prefer the most recent observation when two disagree; the newest "
    "messages after this block take priority over it. Do not mention that you have a memory."
)
DROPPED_MARKER = "[{n} earlier messages of this conversation are left out here to fit the model's context window.]"
TURN_NOTE = "<system-reminder>A note from popagent for this turn, not from the user:\n\n{text}\n</system-reminder>"


@dataclass(frozen=True)
class TurnMemory:
    """What one request carries of the thread, and how it came to be."""

    # The raw messages sent (with their gap markers, or the guard's marker); the observations block
    # goes with the instructions (`lay_out`).
    history: list[ModelMessage]
    # The observations block as sent ('' when there is none) and its tokens.
    observations: str
    observation_tokens: int
    # Raw messages sent (rows) and their tokens.
    raw_messages: int
    raw_tokens: int
    # The whole request as counted (fixed + observations + raw + prompt), before calibration.
    request_tokens: int
    # A gap marker for the prompt itself (temporal_markers), for the turn's instructions.
    prompt_marker: str | None = None
    observed: bool = False  # an observation ran (or was activated) for this request
    waited: bool = False  # the turn waited for observation or reflection work
    # The log's reflection for this request: '' none, 'activated' a buffered one (no model call),
    # 'waited' the background one the turn waited for, 'reflected' the Reflector ran in the turn.
    reflection: str = ""
    dropped: int = 0  # raw messages the guard left out
    window: int | None = None
    settings: MemorySettings | None = None
    # The thread's calibration factor the request was counted with (`after_turn` updates it from there).
    calibration: float = 1.0


def _gap(delta: dt.timedelta) -> str:
    minutes = int(delta.total_seconds() // 60)
    days, rest = divmod(minutes, 24 * 60)
    hours, minutes = divmod(rest, 60)
    parts = [f"{days} day{'s' if days != 1 else ''}"] if days else []
    if hours:
        parts.append(f"{hours} hour{'s' if hours != 1 else ''}")
    if minutes and not days:
        parts.append(f"{minutes} minute{'s' if minutes != 1 else ''}")
    return " ".join(parts)


def temporal_marker(previous: dt.datetime, current: dt.datetime) -> str | None:
    if current - previous < TEMPORAL_GAP:
        return None
    return f"<system-reminder>{_gap(current - previous)} later — {current:%Y-%m-%d %H:%M} UTC</system-reminder>"


def observations_block(log: str) -> str:
    return f"{PREAMBLE}\n\n<observations>\n{log}\n</observations>" if log else ""


def assemble(
    view: ThreadView,
    settings: MemorySettings,
    fixed_tokens: int,
    prompt_tokens: int,
    now: dt.datetime,
) -> TurnMemory:
    """The request of `view`: its active log as the observations block, its raw messages with their
    gap markers, and the whole request's tokens."""
    raw = view.raw
    text = "\n".join(e.content for e in view.log if e.active and e.content)
    block = observations_block(text)
    history: list[ModelMessage] = []
    # From each message's stored count, not by tokenizing the history again: that made every
    # turn's set-up (before its first token) grow with the length of the thread.
    raw_tokens = 0
    previous: dt.datetime | None = None
    for message in raw:
        parts = message.messages
        raw_tokens += message.tokens
        if settings.temporal_markers and previous is not None and message.role == "user":
            marker = temporal_marker(previous, message.created_at)
            if marker and parts and isinstance(parts[0], ModelRequest):
                first = parts[0]
                parts = [
                    dataclasses.replace(first, parts=[UserPromptPart(content=marker), *first.parts]),
                    *parts[1:],
                ]
                raw_tokens += PART_OVERHEAD + count_text(marker)
        history.extend(parts)
        previous = message.created_at
    prompt_marker = None
    if settings.temporal_markers and previous is not None:
        prompt_marker = temporal_marker(previous, now)
    block_tokens = count_text(block) + 7 if block else 0
    return TurnMemory(
        history=history,
        observations=block,
        observation_tokens=block_tokens,
        raw_messages=len(raw),
        raw_tokens=raw_tokens,
        request_tokens=fixed_tokens + block_tokens + raw_tokens + prompt_tokens,
        prompt_marker=prompt_marker,
    )


def _starts_turn(message: ModelMessage) -> bool:
    return isinstance(message, ModelRequest) and any(isinstance(p, UserPromptPart) for p in message.parts)


def drop_oldest(memory: TurnMemory, window: int, calibration: float) -> TurnMemory:
    """The guard's last resort: the oldest raw messages left out (whole turns), a marker in their place."""
    provider = Calibration(calibration)
    body = list(memory.history)
    dropped = 0
    total = memory.request_tokens
    marker_tokens = count_text(DROPPED_MARKER) + 10
    while body and provider.provider_tokens(total + marker_tokens) > request_budget(window):
        message = body.pop(0)
        total -= count_messages([message])
        dropped += 1
        # Never start on a tool return or a response: cut where a user prompt starts.
        while body and not _starts_turn(body[0]):
            total -= count_messages([body.pop(0)])
            dropped += 1
    marker = ModelRequest(parts=[UserPromptPart(content=DROPPED_MARKER.format(n=dropped))])
    kept = [marker, *body]
    return dataclasses.replace(
        memory,
        history=kept,
        raw_tokens=count_messages(body),
        request_tokens=total + marker_tokens,
        dropped=dropped,
    )


@dataclass(frozen=True)
class RequestLayout:
    """A run's message history and its run-level instructions, in prompt-cache order."""

    history: list[ModelMessage]
    instructions: str | None


def lay_out(
    history: Sequence[ModelMessage],
    *,
    observations: str = "",
    turn_parts: str | None = None,
    prompt_marker: str | None = None,
) -> RequestLayout:
    """`[agent's instructions][observations][history][gap marker][turn parts]` + the prompt the run adds.

    The observations block is a run-level instruction, so it follows the agent's own (stable)
    instructions among the leading system messages. The marker and the turn's parts are user-role
    requests after the history (not instructions, which precede it): pydantic-ai sends each part as
    a message of its own, the marker just before the prompt as `assemble` renders it once the
    prompt is history, and neither is stored with the turn (they come before the run's new messages).
    A user-role note rather than a mid-conversation system message because OpenAI-compatible routers
    that translate to Anthropic hoist every system message into the system prompt, ahead of the history.
    """
    trailing: list[ModelMessage] = []
    if prompt_marker:
        trailing.append(ModelRequest(parts=[UserPromptPart(content=prompt_marker)]))
    if turn_parts:
        trailing.append(ModelRequest(parts=[UserPromptPart(content=TURN_NOTE.format(text=turn_parts))]))
    return RequestLayout([*history, *trailing], observations or None)
