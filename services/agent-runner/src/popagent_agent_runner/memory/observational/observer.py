"""The Observer and the Reflector: pydantic-ai agents on the turn's selected model, structured output.

The Observer reads the oldest unobserved messages (and, bounded by `previous_observation_max_tokens`,
the newest earlier observations) and answers `ObserverOutput`: prioritized observations, each naming
the message it comes from and, when the text refers to a resolvable day, that day. The Reflector reads
the whole log and answers the condensed log in the same shape. What is stored is rendered here, never
by the model, so every entry has the same three dates:

    Date: Dec 1, 2026
    * 🔴 (14:05) User's sister Ana moves to Lisbon (refers to Dec 15, 2026; 14 days later)

- the observed date (the header and the time: when the source message was written);
- the referred-to date (`refers to ...`), only when the model resolved one;
- the relative date (`14 days later`), from the observed date to the referred one. It is relative
  to the observation, not to today, so a stored entry never changes and the observations block stays
  byte-stable (a provider's prompt cache keeps hitting).

Bounds: at most `MAX_OBSERVATIONS` entries per call, `MAX_OBSERVATION_CHARS` characters each, tool
results cut to `TOOL_RESULT_MAX_TOKENS`; everything that looks like a credential is redacted before
it is stored (and before a message reaches the Observer).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

import orjson
from pydantic import BaseModel, Field
from pydantic_ai import Agent
from pydantic_ai.messages import (
    BinaryContent,
    DocumentUrl,
    ImageUrl,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserContent,
    UserPromptPart,
)
from pydantic_ai.models import Model
from pydantic_ai.usage import RunUsage

from popagent_agent_runner.llm.stream import DROP_TEXT, streaming_to
from popagent_agent_runner.memory.observational.tokens import count_text
from popagent_core.secret_text import redact_secrets

MAX_OBSERVATIONS = 40
MAX_OBSERVATION_CHARS = 400
TOOL_RESULT_MAX_TOKENS = 2000
# A message's text beyond this is cut before the Observer reads it.
MESSAGE_MAX_CHARS = 20_000
# A `Date: Mon D, YYYY` header line, with its newline, in o200k tokens (at most).
HEADER_TOKENS = 10

Priority = Literal["high", "medium", "low", "completed"]
MARKERS: dict[str, str] = {"high": "🔴", "medium": "🟡", "low": "🟢", "completed": "✅"}

OBSERVER_INSTRUCTIONS = """\
You are the memory of an AI assistant. The observations you write are the only thing the assistant
will remember of the messages below once they leave its context, so keep what it needs to continue
the conversation: facts the user stated about themselves, their preferences, names, numbers, dates,
decisions, unresolved goals, what tools were used and what they found, and tasks completed.

Rules:
- One fact per observation, terse, in the third person ("User prefers ...", "Assistant found ...").
- priority: "high" for explicit user facts, preferences, goals and critical context; "medium" for
  project details and tool results; "low" for minor or uncertain details; "completed" when a task
  or question was finished.
- message: the [number] of the message the observation comes from.
- referred_date: when the message refers to a day that can be resolved from its date ("tomorrow",
  "last Friday", "on the 3rd"), that day as YYYY-MM-DD; otherwise leave it out.
- A user's statement replaces an earlier one on the same subject: say so ("User now prefers ...").
- Never copy passwords, keys or tokens. Do not repeat earlier observations.
- At most 40 observations."""

REFLECTOR_INSTRUCTIONS = """\
You maintain the long-term observation log of an AI assistant. Rewrite the whole log below into a
shorter one that keeps everything the assistant still needs: the user's facts, preferences, goals,
decisions and their dates. Merge duplicates and superseded facts (keep the newest), condense older
details more than recent ones, keep completed tasks as one line each with their outcome. Your output
replaces the log entirely. Keep each entry's observed_on date (and referred_date when it has one)."""


class Observation(BaseModel):
    priority: Priority
    text: str = Field(description="one terse fact")
    message: int = Field(description="the [number] of the message it comes from")
    referred_date: dt.date | None = Field(default=None, description="the day the message refers to, if resolvable")


class ObserverOutput(BaseModel):
    observations: list[Observation]


class Reflected(BaseModel):
    priority: Priority
    text: str
    observed_on: dt.date = Field(description="the date the fact was observed (from its Date header)")
    referred_date: dt.date | None = None


class ReflectorOutput(BaseModel):
    observations: list[Reflected]


@dataclass(frozen=True)
class RawMessage:
    """One stored thread message as the memory reads it."""

    seq: int
    id: str
    role: str
    created_at: dt.datetime
    messages: list[ModelMessage]
    tokens: int


@dataclass(frozen=True)
class Entry:
    """One rendered observation: its observed moment, priority and text (with its dates)."""

    observed_at: dt.datetime
    line: str


def _relative(observed: dt.date, referred: dt.date) -> str:
    days = (referred - observed).days
    if days == 0:
        return "same day"
    word = "later" if days > 0 else "earlier"
    days = abs(days)
    if days < 14:
        amount = f"{days} day{'s' if days != 1 else ''}"
    elif days < 60:
        amount = f"{days // 7} weeks"
    elif days < 730:
        amount = f"{days // 30} months"
    else:
        amount = f"{days // 365} years"
    return f"{amount} {word}"


def _day(value: dt.date) -> str:
    return f"{value:%b} {value.day}, {value.year}"


def _clean(text: str) -> str:
    text = " ".join(redact_secrets(text).split())
    if len(text) > MAX_OBSERVATION_CHARS:
        text = text[: MAX_OBSERVATION_CHARS - 1] + "…"
    return text


def entry(
    priority: str, text: str, observed_at: dt.datetime, referred: dt.date | None, *, with_time: bool = True
) -> Entry:
    """One rendered line; a reflected entry knows only its day (`with_time=False`)."""
    stamp = f"({observed_at:%H:%M}) " if with_time else ""
    line = f"* {MARKERS[priority]} {stamp}{_clean(text)}"
    if referred is not None:
        line += f" (refers to {_day(referred)}; {_relative(observed_at.date(), referred)})"
    return Entry(observed_at, line)


def render(entries: Sequence[Entry]) -> str:
    """Entries grouped under `Date:` headers, in the order given."""
    lines: list[str] = []
    day: dt.date | None = None
    for item in entries:
        if item.observed_at.date() != day:
            day = item.observed_at.date()
            lines.append(f"Date: {_day(day)}")
        lines.append(item.line)
    return "\n".join(lines)


def tail(log: str, max_tokens: int) -> str:
    """The newest lines of `log` within `max_tokens`, under the `Date:` header they belong to."""
    if max_tokens <= 0:
        return ""
    lines = log.splitlines()
    # The header of the oldest kept line costs at most this much.
    budget = max_tokens - HEADER_TOKENS
    first = len(lines)
    for index in range(len(lines) - 1, -1, -1):
        if lines[index].startswith("Date: "):
            continue
        cost = count_text(lines[index]) + 1
        if cost > budget:
            break
        budget -= cost
        first = index
    if first == len(lines):
        return ""
    kept = lines[first:]
    header = next((line for line in reversed(lines[:first]) if line.startswith("Date: ")), None)
    if header is not None and not kept[0].startswith("Date: "):
        kept.insert(0, header)
    return "\n".join(kept)


def _cut_tokens(text: str, max_tokens: int) -> str:
    if count_text(text) <= max_tokens:
        return text
    # 4 characters a token is a fair bound for cutting; the mark says it was cut.
    return text[: max_tokens * 4] + " … [cut]"


def _text(value: object) -> str:
    return value if isinstance(value, str) else orjson.dumps(value, default=str).decode()


def history_prompt(raw: Sequence[RawMessage], *, forward_attachments: bool) -> list[UserContent]:
    """The messages to observe as the Observer reads them: numbered, dated, tool calls and results inline.

    Attachments are forwarded as themselves when `forward_attachments`, else named in a placeholder.
    """
    lines: list[str] = []
    content: list[UserContent] = []
    for number, message in enumerate(raw, start=1):
        stamp = f"{message.created_at:%Y-%m-%d %H:%M} UTC"
        for model_message in message.messages:
            if isinstance(model_message, ModelRequest):
                for part in model_message.parts:
                    if isinstance(part, UserPromptPart):
                        items = [part.content] if isinstance(part.content, str) else list(part.content)
                        texts = [item for item in items if isinstance(item, str)]
                        lines.append(f"[{number}] User ({stamp}): {' '.join(texts)[:MESSAGE_MAX_CHARS]}")
                        for item in items:
                            if isinstance(item, BinaryContent | ImageUrl | DocumentUrl):
                                media = getattr(item, "media_type", "file")
                                if forward_attachments:
                                    content.append("\n".join(lines))
                                    lines = [f"[{number}] (attachment {media} above)"]
                                    content.append(item)
                                else:
                                    lines.append(f"[{number}] [attachment: {media}, not shown]")
                    elif isinstance(part, ToolReturnPart):
                        result = _cut_tokens(_text(part.content), TOOL_RESULT_MAX_TOKENS)
                        lines.append(f"[{number}] Tool result {part.tool_name}: {result}")
            elif isinstance(model_message, ModelResponse):
                for part in model_message.parts:
                    if isinstance(part, TextPart) and part.content.strip():
                        lines.append(f"[{number}] Assistant ({stamp}): {part.content[:MESSAGE_MAX_CHARS]}")
                    elif isinstance(part, ToolCallPart):
                        lines.append(f"[{number}] Tool call {part.tool_name}: {part.args_as_json_str()[:2000]}")
    content.append("\n".join(lines))
    return [redact_secrets(item) if isinstance(item, str) else item for item in content]


def observer_prompt(raw: Sequence[RawMessage], previous: str, *, forward_attachments: bool) -> list[UserContent]:
    head = (
        f"## Previous observations (do not repeat them)\n{previous}\n\n" if previous else ""
    ) + "## New message history to observe\n"
    history = history_prompt(raw, forward_attachments=forward_attachments)
    if history and isinstance(history[0], str):
        return [head + history[0], *history[1:]]
    return [head, *history]


Output = TypeVar("Output")


def _cached_agent(
    cache: dict[tuple[int, str], Agent[None, Output]],
    model: Model,
    custom: str,
    name: str,
    output_type: type[Output],
    instructions: str,
) -> Agent[None, Output]:
    """The agent of this model and custom instructions (appended to its own), built on first use."""
    key = (id(model), custom)
    agent = cache.get(key)
    if agent is None:
        with_custom = instructions + (f"\n\n=== CUSTOM INSTRUCTIONS ===\n{custom}" if custom else "")
        agent = cache[key] = Agent(model, name=name, output_type=output_type, instructions=with_custom, retries=2)
    return agent


class MemoryAgents:
    """The Observer and the Reflector, built per model and instruction set (cheap, cached)."""

    def __init__(self) -> None:
        self._observers: dict[tuple[int, str], Agent[None, ObserverOutput]] = {}
        self._reflectors: dict[tuple[int, str], Agent[None, ReflectorOutput]] = {}

    def _observer(self, model: Model, custom: str) -> Agent[None, ObserverOutput]:
        return _cached_agent(self._observers, model, custom, "observer", ObserverOutput, OBSERVER_INSTRUCTIONS)

    def _reflector(self, model: Model, custom: str) -> Agent[None, ReflectorOutput]:
        return _cached_agent(self._reflectors, model, custom, "reflector", ReflectorOutput, REFLECTOR_INSTRUCTIONS)

    async def observe(
        self,
        model: Model,
        raw: Sequence[RawMessage],
        previous: str,
        *,
        custom: str,
        forward_attachments: bool,
    ) -> tuple[str, RunUsage]:
        """The rendered observations of `raw` (may be empty when the model found nothing to keep)."""
        prompt = observer_prompt(raw, previous, forward_attachments=forward_attachments)
        # Never the turn's sink: an Observer started from a turn must not stream into its answer.
        with streaming_to(DROP_TEXT):
            result = await self._observer(model, custom).run(prompt)
        entries: list[Entry] = []
        for item in result.output.observations[:MAX_OBSERVATIONS]:
            source = raw[min(max(item.message, 1), len(raw)) - 1]
            if item.text.strip():
                entries.append(entry(item.priority, item.text, source.created_at, item.referred_date))
        entries.sort(key=lambda e: e.observed_at)
        return render(entries), result.usage

    async def reflect(self, model: Model, log: str, *, custom: str) -> tuple[list[Entry], RunUsage]:
        with streaming_to(DROP_TEXT):
            result = await self._reflector(model, custom).run(f"## Observations to condense\n{log}")
        entries = [
            entry(
                item.priority,
                item.text,
                dt.datetime.combine(item.observed_on, dt.time(0, 0), tzinfo=dt.UTC),
                item.referred_date,
                with_time=False,
            )
            for item in result.output.observations
            if item.text.strip()
        ]
        entries.sort(key=lambda e: e.observed_at)
        return entries, result.usage
