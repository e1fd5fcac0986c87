"""The streamed response of `LeanOpenAIModel`, and the per-turn sink its text goes to at once.

Why this exists (docs/decisions/lean-model-transport.md; `bench/model_stream.py` checks it): pydantic-ai
pays an order of magnitude more CPU for every stream event it is handed (parts manager, several layers
of async generators, the agent graph) than reading a chunk off the wire costs. So each text or reasoning delta goes to the turn's `TurnSink` the moment it is
parsed — the UI never waits — while pydantic-ai gets the deltas that arrived within ~20 ms merged
into one event. The first delta of every part is handed over at once, so a part starts without
delay, and anything pending is handed over before any other kind of delta, at the end of the
stream and at part boundaries, so the events keep their order. The merged content is the exact
concatenation of what the sink was given, so the assembled `ModelResponse` equals what the UI showed.
A turn's own requests go through `LeanOpenAIModel.request`, which reads this stream with an unbounded
window: pydantic-ai gets the finished response only (`turn.agent_runs`).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
import warnings
from collections.abc import AsyncIterator, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Protocol, runtime_checkable

import httpx
import orjson
from pydantic_ai.exceptions import ModelAPIError
from pydantic_ai.messages import (
    ModelResponseStreamEvent,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ThinkingPart,
    ThinkingPartDelta,
)
from pydantic_ai.models import StreamedResponse
from pydantic_ai.profiles import DEFAULT_THINKING_TAGS, ModelProfile

from popagent_agent_runner.llm.pydantic_ai_internals import StreamedTextRestorer, now_utc, number_to_datetime
from popagent_agent_runner.llm.response import CHAT_FINISH_REASON_MAP, map_logprobs, map_usage, split_content_parts
from popagent_agent_runner.llm.wire import DONE, SSEDecoder, broken_stream_error, stream_error, transport_error

__all__ = ["DROP_TEXT", "LeanStreamedResponse", "TurnSink", "current_turn_sink", "streaming_to"]


class TurnSink(Protocol):
    """Where a turn's text goes as it streams. Called synchronously for every delta: must not block or raise.

    `index` is the pydantic-ai part index, the same as in the `PartStartEvent`/`PartEndEvent` the
    agent run reports for that part, so the turn can tell text parts apart and close them.
    """

    def text_delta(self, index: int, delta: str) -> None: ...

    def thinking_delta(self, index: int, delta: str) -> None: ...


@runtime_checkable
class PacedSink(Protocol):
    """A sink that can fall behind its consumer: the model stream waits while it is `backlogged`."""

    @property
    def backlogged(self) -> bool: ...

    async def drained(self) -> None: ...


_TURN_SINK: ContextVar[TurnSink | None] = ContextVar("popagent_turn_sink", default=None)


@contextlib.contextmanager
def streaming_to(sink: TurnSink | None) -> Iterator[None]:
    """Send the text of the model streams opened inside this block to `sink`.

    A context variable, so tasks started inside inherit it: a delegation tool that runs a specialist
    whose text must not reach the supervisor's output wraps that run in `streaming_to(DROP_TEXT)`
    (or a sink of its own). With `None`, `request()` asks for a complete, non-streamed answer.
    """
    token = _TURN_SINK.set(sink)
    try:
        yield
    finally:
        _TURN_SINK.reset(token)


def current_turn_sink() -> TurnSink | None:
    return _TURN_SINK.get()


class _TextDropped:
    def text_delta(self, index: int, delta: str) -> None:
        pass

    def thinking_delta(self, index: int, delta: str) -> None:
        pass


DROP_TEXT: Final[TurnSink] = _TextDropped()
"""A sink that forwards nothing, for a run whose text nobody reads as it streams (a specialist's).

`streaming_to(DROP_TEXT)` still streams the run's requests rather than sending `"stream": false`:
9Router's non-streamed answers add 2000 to the upstream's `prompt_tokens` without saying so, while
its streams end with the upstream's own usage chunk (docs/configuration.md, "Pointing it at a model gateway")."""


# The characters a model may write for the zero-width joiner pydantic-ai puts inside special tokens.
_ZERO_WIDTH: Final = re.compile("[\u200b\u200c\u200d\u2060\ufeff]")

# What is pending for pydantic-ai.
_NONE: Final = 0
_TEXT: Final = 1  # content text into a TextPart, or into a ThinkingPart opened by a `<think>` tag
_REASONING: Final = 2  # a reasoning field (`reasoning_content`, ...) into its ThinkingPart
_TOOL_ARGS: Final = 3  # arguments of a tool call whose part has started


@dataclass
class LeanStreamedResponse(StreamedResponse):
    """A Chat Completions SSE stream as pydantic-ai events, mapped as `OpenAIStreamedResponse` maps it."""

    _model_name: str
    _model_profile: ModelProfile
    _provider_name: str
    _provider_url: str
    _response: httpx.Response
    _bytes: AsyncIterator[bytes]
    _decoder: SSEDecoder
    _first_chunk: dict[str, Any]
    _backlog: list[bytes]
    _sink: TurnSink | None
    _window: float
    _timestamp: datetime = field(default_factory=now_utc)
    _usage_received: bool | None = field(default=False, init=False)

    _provider_timestamp: datetime | None = field(default=None, init=False)
    _has_finish_reason: bool = field(default=False, init=False)
    _has_refusal: bool = field(default=False, init=False)
    _refusal_text: str = field(default="", init=False)
    _logprobs: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]], init=False)
    _content_generation: int = field(default=0, init=False)
    _reasoning_generation: int = field(default=0, init=False)
    _held_text_whitespace: str = field(default="", init=False)
    _awaiting_text_after_reasoning: bool = field(default=False, init=False)

    # The part each vendor id has in pydantic-ai once its first delta was handed over: only then can
    # later deltas wait in `_pending`, as they no longer start anything.
    _text_vid: tuple[str, int] | None = field(default=None, init=False)
    _text_index: int = field(default=-1, init=False)
    _text_is_thinking: bool = field(default=False, init=False)
    _reasoning_vid: tuple[str, str, int] | None = field(default=None, init=False)
    _reasoning_index: int = field(default=-1, init=False)
    _tool_indexes: set[int] = field(default_factory=set[int], init=False)

    _pending: list[str] = field(default_factory=list[str], init=False)
    _pending_kind: int = field(default=_NONE, init=False)
    _pending_vid: Any = field(default=None, init=False)
    _last_handover: float = field(default=0.0, init=False)

    # The sink's view of the current text part, restored like pydantic-ai restores it (see `_sink_text`).
    _restoring: bool = field(default=False, init=False)
    _sink_index: int = field(default=-1, init=False)
    _sink_tail: str = field(default="", init=False)
    _sink_restorer: StreamedTextRestorer | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        profile = self._model_profile
        self._thinking_tags: tuple[str, str] | None = profile.get("thinking_tags", DEFAULT_THINKING_TAGS)
        self._ignore_leading_whitespace: bool = profile.get("ignore_streamed_leading_whitespace", False)
        custom_field = profile.get("openai_chat_thinking_field", None)
        self._thinking_fields: tuple[str, ...] = tuple(
            name for name in (custom_field, "reasoning", "reasoning_content") if name
        )
        self._requires_finish_reason: bool = profile.get("openai_chat_streaming_requires_finish_reason", False)

    async def close_stream(self) -> None:
        await self._response.aclose()

    @property
    def model_name(self) -> str:
        return self._model_name

    @property
    def provider_name(self) -> str:
        return self._provider_name

    @property
    def provider_url(self) -> str:
        return self._provider_url

    @property
    def timestamp(self) -> datetime:
        return self._timestamp

    # -- the stream ---------------------------------------------------------------------------------------------

    async def _get_event_iterator(self) -> AsyncIterator[ModelResponseStreamEvent]:
        # Set by pydantic-ai's model boundary after `request_stream` yielded us, so read it here.
        self._restoring = self._parts_manager.special_token_restorer is not None
        done = False
        try:
            events = self._handle(self._first_chunk)
            if events:
                for event in events:
                    yield event
            for payload in self._backlog:
                if payload.startswith(DONE):
                    done = True
                    break
                events = self._handle(self._decode(payload))
                if events:
                    for event in events:
                        yield event
            if not done:
                decoder = self._decoder
                # Backpressure: while the turn's consumer is behind, the model stream is not read on
                # (the model server's socket then fills, and it waits too).
                paced = self._sink if isinstance(self._sink, PacedSink) else None
                async for raw in self._bytes:
                    for payload in decoder.feed(raw):
                        if payload.startswith(DONE):
                            done = True
                            break
                        events = self._handle(self._decode(payload))
                        if events:
                            for event in events:
                                yield event
                    if done:
                        break
                    if paced is not None and paced.backlogged:
                        await paced.drained()
                else:
                    for payload in decoder.close():
                        if payload.startswith(DONE):
                            done = True
                            break
                        events = self._handle(self._decode(payload))
                        if events:
                            for event in events:
                                yield event
        except httpx.TransportError as error:
            if self.cancelled:
                raise
            raise transport_error(self._model_name, error, in_stream=True) from error
        if done:
            await self._drain()
        elif not (self._has_finish_reason or self._has_refusal or self.cancelled):
            raise broken_stream_error(self._model_name, "the connection closed without a finish reason")

        for event in self._handover():
            yield event
        self._sink_text_end()
        if self._refusal_text:
            self.provider_details = {**(self.provider_details or {}), "refusal": self._refusal_text}
        if self._logprobs:
            self.provider_details = {**(self.provider_details or {}), "logprobs": self._logprobs}
        if self._requires_finish_reason and not self._has_finish_reason and not self.cancelled:
            raise ModelAPIError(model_name=self.model_name, message="Streamed response ended without a `finish_reason`")
        if not self._has_finish_reason and not self._has_refusal and not self.cancelled:
            # Some OpenAI-compatible servers never send a finish reason.
            self.finish_reason = "stop"

    async def _drain(self) -> None:
        # HTTP/1.1 reuses the connection only once the body is read to its end; a server may send a
        # second `[DONE]` (9Router does) or nothing more. Bounded, as a server could keep it open.
        if self._response.http_version != "HTTP/1.1":
            return
        with contextlib.suppress(TimeoutError, httpx.TransportError):
            async with asyncio.timeout(1.0):
                async for _ in self._bytes:
                    pass

    def _decode(self, payload: bytes) -> dict[str, Any]:
        try:
            chunk = orjson.loads(payload)
        except orjson.JSONDecodeError as error:
            raise ModelAPIError(
                model_name=self._model_name, message=f"Failed to decode response as JSON: {error}"
            ) from error
        if not isinstance(chunk, dict):
            raise ModelAPIError(model_name=self._model_name, message=f"Unexpected stream event: {payload[:200]!r}")
        return chunk

    # -- one chunk ----------------------------------------------------------------------------------------------

    def _handle(self, chunk: dict[str, Any]) -> list[ModelResponseStreamEvent] | None:
        """The events `chunk` gives pydantic-ai now (often none: its delta waits in `_pending`)."""
        if error := chunk.get("error"):
            raise stream_error(self._model_name, error)
        if self._provider_timestamp is None and (created := chunk.get("created")):
            self._provider_timestamp = number_to_datetime(created)
            self.provider_details = {**(self.provider_details or {}), "timestamp": self._provider_timestamp}
        if (usage := chunk.get("usage")) is not None and isinstance(usage, dict):
            # The last usage wins: 9Router puts an estimate on the finish chunk before the real figures.
            self._add_usage(
                map_usage(usage, self._provider_name, self._provider_url, self._model_name),
                reported=True,
                cumulative=True,
            )
        if response_id := chunk.get("id"):
            self.provider_response_id = response_id
        if model := chunk.get("model"):
            self._model_name = model
        if moderation := chunk.get("moderation"):
            self.provider_details = {**(self.provider_details or {}), "moderation": moderation}
        if service_tier := chunk.get("service_tier"):
            self.provider_details = {**(self.provider_details or {}), "service_tier": service_tier}

        choices = chunk.get("choices")
        if not choices:
            return None
        choice = choices[0]
        finish_reason = choice.get("finish_reason")
        if finish_reason:
            self._has_finish_reason = True
        delta = choice.get("delta")
        if delta is None:
            return None

        if not finish_reason and choice.get("logprobs") is None and not delta.get("refusal"):
            pending = self._try_pending(delta)
            if pending is not None:
                return pending

        events = self._handover()
        if refusal := delta.get("refusal"):
            self._has_refusal = True
            self.finish_reason = "content_filter"
            self._refusal_text += refusal
            return events
        if finish_reason and not self._has_refusal:
            self.finish_reason = CHAT_FINISH_REASON_MAP.get(finish_reason)
        details: dict[str, Any] = {}
        if (logprobs := choice.get("logprobs")) and isinstance(content := logprobs.get("content"), list) and content:
            self._logprobs.extend(map_logprobs(content))
        if finish_reason and not self._has_refusal:
            details["finish_reason"] = finish_reason
        if details:
            self.provider_details = {**(self.provider_details or {}), **details}

        new = [*self._reasoning_events(delta), *self._text_events(delta), *self._tool_call_events(delta)]
        if new:
            self._last_handover = time.monotonic()
            if self._sink is not None:
                self._forward(new)
            events.extend(new)
        return events

    def _try_pending(self, delta: dict[str, Any]) -> list[ModelResponseStreamEvent] | None:
        """Keep a delta that only extends a part pydantic-ai already has: forward it to the sink now,
        hand it to pydantic-ai later. `None` when the delta needs handling now (`[]`: kept)."""
        content = delta.get("content")
        tool_calls = delta.get("tool_calls")
        reasoning_field = None
        reasoning: object = None
        for name in self._thinking_fields:
            if value := delta.get(name):
                reasoning_field, reasoning = name, value
                break

        if content.__class__ is str and content:
            if tool_calls or reasoning_field is not None:
                return None
            vid = ("content", self._content_generation)
            if self._text_vid != vid or ((tags := self._thinking_tags) is not None and content in tags):
                return None
            kind, key = _TEXT, vid
            if self._sink is not None:
                if self._text_is_thinking:
                    self._sink.thinking_delta(self._text_index, content)
                else:
                    self._sink_text(self._text_index, content)
            extra: str = content
        elif reasoning_field is not None:
            if tool_calls or content or reasoning.__class__ is not str:
                return None
            vid_r = ("reasoning", reasoning_field, self._reasoning_generation)
            if self._reasoning_vid != vid_r:
                return None
            kind, key = _REASONING, vid_r
            assert isinstance(reasoning, str)
            if self._sink is not None:
                self._sink.thinking_delta(self._reasoning_index, reasoning)
            extra = reasoning
        elif tool_calls:
            if content or len(tool_calls) != 1:
                return None
            call = tool_calls[0]
            function = call.get("function")
            index = call.get("index")
            if (
                index not in self._tool_indexes
                or call.get("id") is not None
                or call.get("extra_content")
                or not isinstance(function, dict)
                or function.get("name") is not None
            ):
                return None
            arguments = function.get("arguments")
            if arguments.__class__ is not str or not arguments:
                return None
            kind, key = _TOOL_ARGS, index
            extra = arguments
        else:
            return None

        events: list[ModelResponseStreamEvent] = []
        if self._pending_kind != kind or self._pending_vid != key:
            events = self._handover()
            self._pending_kind, self._pending_vid = kind, key
        self._pending.append(extra)
        now = time.monotonic()
        if now - self._last_handover >= self._window:
            events.extend(self._handover())
        return events

    def _handover(self) -> list[ModelResponseStreamEvent]:
        """Give pydantic-ai what is pending, as one delta."""
        kind = self._pending_kind
        if kind == _NONE:
            return []
        pieces, vid = self._pending, self._pending_vid
        self._pending, self._pending_kind, self._pending_vid = [], _NONE, None
        self._last_handover = time.monotonic()
        manager = self._parts_manager
        content = "".join(pieces)
        if kind == _TEXT:
            tags = self._thinking_tags
            if tags is not None and content in tags and len(pieces) > 1:
                # Merged pieces that spell a tag no single piece was must not open or close a thinking part:
                # hand them over in two deltas, neither of which is a tag (a tag is never a prefix of the other).
                chunks = ["".join(pieces[:-1]), pieces[-1]]
            else:
                chunks = [content]
            return [
                event
                for chunk in chunks
                for event in manager.handle_text_delta(
                    vendor_part_id=vid,
                    content=chunk,
                    thinking_tags=tags,
                    ignore_leading_whitespace=self._ignore_leading_whitespace,
                )
            ]
        if kind == _REASONING:
            return list(
                manager.handle_thinking_delta(
                    vendor_part_id=vid, id=vid[1], content=content, provider_name=self._provider_name
                )
            )
        return list(manager.handle_tool_call_delta_events(vendor_part_id=vid, args=content))

    # -- deltas handled at once, as `OpenAIStreamedResponse` handles every delta -----------------------------------

    def _advance_part_boundary(self, source: str) -> None:
        if source != "reasoning":
            self._reasoning_generation += 1
            self._awaiting_text_after_reasoning = False
        if source != "content" and isinstance(
            self._parts_manager.get_part_by_vendor_id(("content", self._content_generation)), TextPart
        ):
            self._content_generation += 1
            self._awaiting_text_after_reasoning = source == "reasoning"

    def _reasoning_events(self, delta: dict[str, Any]) -> list[ModelResponseStreamEvent]:
        for name in self._thinking_fields:
            reasoning = delta.get(name)
            if not reasoning:
                continue
            if not isinstance(reasoning, str):
                warnings.warn(
                    f"Unexpected non-string value for {name!r}: {type(reasoning).__name__}.", UserWarning, stacklevel=2
                )
                continue
            vid = ("reasoning", name, self._reasoning_generation)
            events: list[ModelResponseStreamEvent] = []
            for event in self._parts_manager.handle_thinking_delta(
                vendor_part_id=vid, id=name, content=reasoning, provider_name=self._provider_name
            ):
                if isinstance(event, PartStartEvent):
                    self._advance_part_boundary("reasoning")
                    self._reasoning_vid, self._reasoning_index = vid, event.index
                events.append(event)
            return events
        return []

    def _text_events(self, delta: dict[str, Any]) -> list[ModelResponseStreamEvent]:
        content = split_content_parts(delta.get("content"))
        if not isinstance(content, str) or not content:
            return []
        vid = ("content", self._content_generation)
        tags = self._thinking_tags
        if tags is not None and content == tags[1] and self._text_vid == vid and self._text_is_thinking:
            # The parts manager stops tracking the vendor id at the closing tag: the next text starts a part.
            self._text_vid = None
        events: list[ModelResponseStreamEvent] = []
        for event in self._parts_manager.handle_text_delta(
            vendor_part_id=vid,
            content=content,
            thinking_tags=tags,
            ignore_leading_whitespace=self._ignore_leading_whitespace,
        ):
            if isinstance(event, PartStartEvent):
                self._advance_part_boundary("content")
                part = event.part
                if isinstance(part, ThinkingPart):
                    part.id = "content"
                    part.provider_name = self._provider_name
                elif isinstance(part, TextPart) and self._held_text_whitespace:
                    part.content = self._held_text_whitespace + part.content
                    self._held_text_whitespace = ""
                self._text_vid, self._text_index = vid, event.index
                self._text_is_thinking = isinstance(part, ThinkingPart)
            events.append(event)
        if not events and content.isspace() and self._awaiting_text_after_reasoning:
            # As `OpenAIStreamedResponse`: whitespace dropped right after reasoning is held for the next text part.
            self._held_text_whitespace += content
        return events

    def _tool_call_events(self, delta: dict[str, Any]) -> list[ModelResponseStreamEvent]:
        events: list[ModelResponseStreamEvent] = []
        for call in delta.get("tool_calls") or []:
            extra_content = call.get("extra_content")
            provider_details = {"extra_content": extra_content} if extra_content else None
            function = call.get("function")
            index = call.get("index")
            for event in self._parts_manager.handle_tool_call_delta_events(
                vendor_part_id=index,
                tool_name=function.get("name") if function is not None else None,
                args=function.get("arguments") if function is not None else None,
                tool_call_id=call.get("id"),
                provider_name=self._provider_name if provider_details else None,
                provider_details=provider_details,
            ):
                if isinstance(event, PartStartEvent):
                    self._advance_part_boundary("tool")
                    if isinstance(index, int):
                        self._tool_indexes.add(index)
                events.append(event)
        return events

    # -- the sink -----------------------------------------------------------------------------------------------

    def _forward(self, events: list[ModelResponseStreamEvent]) -> None:
        """Send the text of events handed over at once to the sink (kept deltas were sent on arrival)."""
        sink = self._sink
        assert sink is not None
        for event in events:
            if isinstance(event, PartStartEvent):
                self._sink_text_end()
                part = event.part
                if isinstance(part, TextPart):
                    if part.content:
                        self._sink_text(event.index, part.content)
                elif isinstance(part, ThinkingPart) and part.content:
                    sink.thinking_delta(event.index, part.content)
            elif isinstance(event, PartDeltaEvent):
                delta = event.delta
                if isinstance(delta, TextPartDelta):
                    if delta.content_delta:
                        self._sink_text(event.index, delta.content_delta)
                elif isinstance(delta, ThinkingPartDelta) and delta.content_delta:
                    sink.thinking_delta(event.index, delta.content_delta)

    def _sink_text(self, index: int, text: str) -> None:
        # pydantic-ai removes the joiner it put inside special tokens from response text (holding a
        # possible joiner back until the next characters show whether it is in a token), so the
        # sink gets the text through the same restorer — only once a zero-width character shows up.
        sink = self._sink
        assert sink is not None
        if index != self._sink_index:
            self._sink_text_end()
            self._sink_index, self._sink_tail = index, ""
        restorer = self._sink_restorer
        if restorer is None:
            if not (self._restoring and _ZERO_WIDTH.search(text)):
                self._sink_tail = text
                sink.text_delta(index, text)
                return
            restorer = self._sink_restorer = StreamedTextRestorer(previous=self._sink_tail[-1:])
        if restored := restorer.feed(text):
            sink.text_delta(index, restored)

    def _sink_text_end(self) -> None:
        restorer, self._sink_restorer = self._sink_restorer, None
        if restorer is not None and self._sink is not None and (held := restorer.flush()):
            self._sink.text_delta(self._sink_index, held)
