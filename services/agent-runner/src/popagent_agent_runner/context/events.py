"""The turn's output: typed turn events for the gateway, and the assistant UI message they build.

`TurnOutput` is the one place a turn writes to. Each call appends protobuf `TurnEvent`s to
a queue and updates the AI SDK UI message that a client reading the stream reconstructs
(the parts `step-start`, `text`, `tool-<name>`, `data-agentActivity`), so what the turn
persists is what the UI showed. It is also the lean model's `TurnSink`: text deltas
arrive synchronously from the model stream and must never block.

`batches()` hands the consumer everything queued since its last read as one
`TurnEventBatch` (text deltas of one part that wait together become one delta): a fast
model costs one gRPC message and one SSE chunk per batch instead of one per token, and
neither the start nor the first token is ever held back to build a batch.

Backpressure: the queue is bounded in bytes. Past `max_queued_bytes` the
turn's output is `backlogged` and the model stream waits (`drained()`) until the consumer (the
gRPC stream, paced by the gateway, paced by its client) takes the queue, so a slow reader holds
one bounded batch, not the whole answer. A waiting text delta is kept as its pieces and built
into its protobuf field once, when the batch leaves (appending to a protobuf string copies the
whole string every time, and the message keeps every copy until it is freed).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson

from popagent.agent_runner.v1 import agent_runner_pb2 as pb


def dumps(value: Any) -> str:
    return orjson.dumps(value, default=str).decode()


def usage_metadata(
    input_tokens: int,
    output_tokens: int,
    *,
    estimated: bool = False,
    cached_input_tokens: int = 0,
    cost_usd: float | None = None,
) -> dict[str, Any]:
    """The assistant message's `metadata.usage`; `estimated` only when the provider's figures were an estimate,
    `cachedInputTokens` only when the provider served some input from its cache, `costUsd` only when the
    catalog priced every model call of the turn."""
    usage: dict[str, Any] = {"inputTokens": input_tokens, "outputTokens": output_tokens}
    if cached_input_tokens:
        usage["cachedInputTokens"] = cached_input_tokens
    if cost_usd is not None:
        usage["costUsd"] = cost_usd
    if estimated:
        usage["estimated"] = True
    return usage


# A turn's events waiting for its consumer, in bytes, past which the model stream waits.
MAX_QUEUED_BYTES = 256 * 1024
# The most characters one text delta event carries; a part's waiting text past it goes on in the
# next event. At UTF-8's 4 bytes a character an event stays below the turn log's message size
# (turn/log.py, MAX_MESSAGE_BYTES), so the log stores each event the live stream sent, whole: one
# read of a fast model's stream can hold megabytes, past what NATS takes in one message.
MAX_DELTA_CHARS = 96 * 1024
# The events that end a turn's stream: the client's last.
TERMINAL_EVENTS = frozenset({"finish", "error", "abort"})


class TurnEvents:
    """A single-consumer queue of turn events, drained in batches.

    Every batch leaves the moment its first event is queued until the first text has gone out,
    so neither the start nor the first token ever waits. After that, text deltas leave at most
    every `min_interval_s`: a paced model stream (one token every few ms) would otherwise cost one
    gRPC message, one gateway wake-up and one SSE write per token, which is what limits concurrent
    chats on a small machine. Any other event (a tool call, a step or text boundary, the finish)
    takes what is waiting with it at once, so a turn's structure and its end are never held back.
    """

    def __init__(self, min_interval_s: float = 0.0, max_queued_bytes: int = MAX_QUEUED_BYTES) -> None:
        self._events: list[pb.TurnEvent] = []
        self._ready = asyncio.Event()
        self._closed = False
        self._text_queued = False
        # Whether an event other than a text delta waits (it leaves without pacing).
        self._urgent = False
        self._pause_waiter: asyncio.Future[None] | None = None
        # The pending text delta the next delta of the same part joins, and its pieces so far.
        self._open_delta: pb.TextDelta | None = None
        self._open_pieces: list[str] = []
        self._open_chars = 0
        self._queued_bytes = 0
        self._drained = asyncio.Event()
        self.min_interval_s = min_interval_s
        self.max_queued_bytes = max_queued_bytes
        # What the next batch waits for (the prompt's storing), however it ends.
        self._hold: asyncio.Future[Any] | None = None
        # A finish, error or abort was queued: nothing is queued after it.
        self._terminated = False

    @property
    def backlogged(self) -> bool:
        """More than `max_queued_bytes` wait for the consumer: the producer should wait (`drained`)."""
        return self._queued_bytes > self.max_queued_bytes and not self._closed

    async def drained(self) -> None:
        """Until the consumer took the queue (or the queue closed)."""
        while self.backlogged:
            self._drained.clear()
            await self._drained.wait()

    def _seal_text(self) -> None:
        pending = self._open_delta
        if pending is not None:
            pending.delta = "".join(self._open_pieces)
            self._open_delta = None
            self._open_pieces = []
            self._open_chars = 0

    def put(self, event: pb.TurnEvent) -> None:
        if self._terminated:
            # The stream's terminal event is out. A cancelled turn's straggler must not follow it:
            # pydantic-ai runs a model request in a task of its own behind `asyncio.shield` and
            # drains it after the turn's cancellation, so the request may still open its step.
            return
        if event.WhichOneof("event") in TERMINAL_EVENTS:
            self._terminated = True
        self._seal_text()
        self._events.append(event)
        self._queued_bytes += event.ByteSize()
        self._urgent = True
        self._ready.set()
        self._end_pause()

    def put_text(self, part_id: str, delta: str) -> None:
        """A text delta, merged into the one still waiting for the same part (one SSE chunk, not
        one per token, up to MAX_DELTA_CHARS); from the batch that carries the first text on,
        batches are paced."""
        if self._terminated:
            return
        self._queued_bytes += len(delta)
        while True:
            pending = self._open_delta
            room = MAX_DELTA_CHARS - self._open_chars
            if pending is None or pending.part_id != part_id or room <= 0:
                self._seal_text()
                event = pb.TurnEvent(text_delta=pb.TextDelta(part_id=part_id))
                self._events.append(event)
                self._open_delta = event.text_delta
                self._text_queued = True
                self._ready.set()
                room = MAX_DELTA_CHARS
            piece, delta = delta[:room], delta[room:]
            self._open_pieces.append(piece)
            self._open_chars += len(piece)
            if not delta:
                return

    def hold_until(self, done: asyncio.Future[Any]) -> None:
        """Keep what comes next queued until `done` is done (the batch already out is not recalled)."""
        self._hold = done

    def close(self) -> None:
        """No more events: `batches()` ends once the queue is empty."""
        self._closed = True
        self._ready.set()
        self._drained.set()
        self._end_pause()

    async def _pause(self, loop: asyncio.AbstractEventLoop, seconds: float) -> None:
        """Wait `seconds`, or less if a non-text event arrives or the queue closes meanwhile."""
        waiter = self._pause_waiter = loop.create_future()
        timer = loop.call_later(seconds, self._end_pause)
        try:
            await waiter
        finally:
            timer.cancel()
            self._pause_waiter = None

    def _end_pause(self) -> None:
        waiter = self._pause_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def batches(self) -> AsyncIterator[pb.TurnEventBatch]:
        loop = asyncio.get_running_loop()
        paced = False
        sent_at = 0.0
        while True:
            await self._ready.wait()
            if self._hold is not None:
                hold, self._hold = self._hold, None
                await asyncio.wait([hold])  # at once when it is done; its error is its owner's
            if paced and not self._closed and not self._urgent:
                wait = sent_at + self.min_interval_s - loop.time()
                if wait > 0:
                    await self._pause(loop, wait)
            self._ready.clear()
            if self._events:
                self._seal_text()
                events, self._events = self._events, []
                self._queued_bytes = 0
                self._drained.set()
                self._urgent = False
                paced = self._text_queued
                sent_at = loop.time()
                yield pb.TurnEventBatch(events=events)
            if self._closed and not self._events:
                return


class _Text:
    __slots__ = ("index", "part", "pieces")

    def __init__(self, index: int, part: dict[str, Any]) -> None:
        self.index = index
        self.part = part
        self.pieces: list[str] = []


class TurnOutput:
    """Events for the stream plus the assistant UI message, kept in step."""

    def __init__(self, events: TurnEvents) -> None:
        self.events = events
        self.message_id = ""
        self.metadata: dict[str, Any] = {}
        self.parts: list[dict[str, Any]] = []
        self._step_open = False
        # Whether the current step has streamed anything (a failure then broke a response).
        self.step_has_output = False
        self._text: _Text | None = None
        self._text_count = 0
        self._tools: dict[str, dict[str, Any]] = {}
        # Approvals this turn's calls wait for (docs/approvals.md): a client leaving meanwhile never cancels it.
        self.awaiting_approvals: set[str] = set()
        self._activities: dict[str, dict[str, Any]] = {}
        # The stream's terminal event (finish, error or abort) is out: it is the client's last.
        self._ended = False
        # A user cancelled the turn (not a disconnect or a shutdown): what it answered is stored so marked.
        self.cancelled = False
        # Stores how far the turn got (a JSON object) at each tool step, so another runner can go on
        # with it (docs/turns.md, Takeover); None: not stored (task turns).
        self.store_progress: Callable[[dict[str, Any]], Awaitable[None]] | None = None

    # -- stream shape ------------------------------------------------------------------

    def start(self, turn_id: str, message_id: str, model: str, trace_id: str = "") -> None:
        self.message_id = message_id
        self.metadata = {"turnId": turn_id, "model": model}
        if trace_id:
            self.metadata["traceId"] = trace_id
        self.events.put(
            pb.TurnEvent(start=pb.TurnStart(turn_id=turn_id, message_id=message_id, model=model, trace_id=trace_id))
        )

    def carry(self, parts: list[dict[str, Any]]) -> None:
        """The parts a lost runner's attempt of this turn had streamed, as this message's own (they
        reached the turn's log already, so nothing is streamed again)."""
        self.parts = [dict(part) for part in parts]
        self._text_count = sum(1 for part in self.parts if part["type"] == "text")
        self._tools = {part["toolCallId"]: part for part in self.parts if "toolCallId" in part}
        self._activities = {part["id"]: part for part in self.parts if part["type"] == "data-agentActivity"}

    def step_start(self) -> None:
        if self._ended:
            return  # a straggler of a cancelled turn (TurnEvents.put): no step after the end
        self.step_finish()
        self._step_open = True
        self.step_has_output = False
        self.parts.append({"type": "step-start"})
        self.events.put(pb.TurnEvent(step_start=pb.StepBoundary()))

    def step_finish(self) -> None:
        if not self._step_open:
            return
        self.text_end()
        self._step_open = False
        self.events.put(pb.TurnEvent(step_finish=pb.StepBoundary()))

    # -- text (the TurnSink protocol, called for every streamed delta) ---------------------

    @property
    def forward_interval_s(self) -> float:
        """How often text leaves for the gateway once it flows: the model stream need not be read more often."""
        return self.events.min_interval_s

    @property
    def backlogged(self) -> bool:
        """The consumer is behind: the model stream should wait (`drained`) before reading on."""
        return self.events.backlogged

    async def drained(self) -> None:
        await self.events.drained()

    def text_delta(self, index: int, delta: str) -> None:
        if self._ended:
            # A delta the model stream read after the turn's end (a shutdown's error, written
            # before the turn's cancellation lands): the client's stream has already ended.
            return
        text = self._text
        if text is None or text.index != index:
            text = self._text_start(index)
        text.pieces.append(delta)
        self.step_has_output = True
        self.events.put_text(text.part["_id"], delta)

    def thinking_delta(self, index: int, delta: str) -> None:
        """Reasoning is not part of the UI stream (the contract has no reasoning event)."""

    def say(self, text: str) -> None:
        """A whole text part at once (a refusal, a limit message): its own step."""
        self.step_start()
        self.text_delta(-1, text)
        self.step_finish()

    def _text_start(self, index: int) -> _Text:
        self.text_end()
        if not self._step_open:
            self.step_start()
        self._text_count += 1
        part_id = f"{self.message_id}-text-{self._text_count}"
        part: dict[str, Any] = {"type": "text", "text": "", "state": "streaming", "_id": part_id}
        self.parts.append(part)
        self._text = _Text(index, part)
        self.events.put(pb.TurnEvent(text_start=pb.PartBoundary(part_id=part_id)))
        return self._text

    def text_end(self) -> None:
        text, self._text = self._text, None
        if text is None:
            return
        text.part["text"] = "".join(text.pieces)
        text.part["state"] = "done"
        self.events.put(pb.TurnEvent(text_end=pb.PartBoundary(part_id=text.part["_id"])))

    # -- tools and activity ------------------------------------------------------------

    def tool_input(self, tool_call_id: str, tool_name: str, arguments: dict[str, Any]) -> None:
        if tool_call_id in self._tools:
            return  # shown already, by the approval it asked for
        self.text_end()
        if not self._step_open:
            self.step_start()
        part: dict[str, Any] = {
            "type": f"tool-{tool_name}",
            "toolCallId": tool_call_id,
            "state": "input-available",
            "input": arguments,
        }
        self._tools[tool_call_id] = part
        self.parts.append(part)
        self.step_has_output = True
        self.events.put(
            pb.TurnEvent(
                tool_input=pb.ToolInput(tool_call_id=tool_call_id, tool_name=tool_name, input_json=dumps(arguments))
            )
        )

    def tool_output(self, tool_call_id: str, output: Any) -> None:
        part = self._tools.get(tool_call_id)
        if part is not None:
            part["state"] = "output-available"
            part["output"] = output
        self.events.put(pb.TurnEvent(tool_output=pb.ToolOutput(tool_call_id=tool_call_id, output_json=dumps(output))))

    def tool_approval_request(
        self, tool_call_id: str, tool_name: str, arguments: dict[str, Any], approval_id: str, reason: str
    ) -> None:
        """The call waits for a person: its part (shown first if it was not) is `approval-requested`."""
        self.tool_input(tool_call_id, tool_name, arguments)
        part = self._tools[tool_call_id]
        part["state"] = "approval-requested"
        part["approval"] = {"id": approval_id}
        self.awaiting_approvals.add(approval_id)
        self.events.put(
            pb.TurnEvent(
                approval_request=pb.ToolApprovalRequest(
                    approval_id=approval_id, tool_call_id=tool_call_id, reason=reason
                )
            )
        )

    def tool_approved(self, tool_call_id: str, approval_id: str) -> None:
        self.awaiting_approvals.discard(approval_id)
        part = self._tools.get(tool_call_id)
        if part is not None:
            part["state"] = "approval-responded"
            part["approval"] = {"id": approval_id, "approved": True}

    def tool_denied(
        self, tool_call_id: str, tool_name: str, arguments: dict[str, Any], approval_id: str, reason: str
    ) -> None:
        """The call was denied (or its approval expired) and never ran: `output-denied`."""
        self.awaiting_approvals.discard(approval_id)
        self.tool_input(tool_call_id, tool_name, arguments)
        part = self._tools[tool_call_id]
        part["state"] = "output-denied"
        part["approval"] = {"id": approval_id, "approved": False, "reason": reason}
        self.events.put(
            pb.TurnEvent(tool_denied=pb.ToolDenied(tool_call_id=tool_call_id, approval_id=approval_id, reason=reason))
        )

    def tool_error(self, tool_call_id: str, error_text: str) -> None:
        part = self._tools.get(tool_call_id)
        if part is not None and part["state"] == "output-denied":
            return  # its denial is its outcome
        if part is not None:
            part["state"] = "output-error"
            part["errorText"] = error_text
        self.events.put(
            pb.TurnEvent(
                tool_output=pb.ToolOutput(tool_call_id=tool_call_id, output_json=dumps(error_text), is_error=True)
            )
        )

    def activity(self, activity_id: str, data: dict[str, Any]) -> None:
        """A `data-agentActivity` part; a later call with the same id replaces it (as the AI SDK does)."""
        part = self._activities.get(activity_id)
        if part is None:
            part = self._activities[activity_id] = {"type": "data-agentActivity", "id": activity_id, "data": data}
            self.parts.append(part)
        else:
            part["data"] = data
        self.events.put(pb.TurnEvent(agent_activity=pb.AgentActivity(activity_id=activity_id, data_json=dumps(data))))

    # -- the end -----------------------------------------------------------------------

    def finish(
        self,
        finish_reason: str,
        input_tokens: int,
        output_tokens: int,
        *,
        estimated: bool = False,
        cached_input_tokens: int = 0,
        cost_usd: float | None = None,
    ) -> None:
        """The end of the turn; `estimated`: the provider reported only an estimate of some request's usage."""
        self.step_finish()
        self.metadata["usage"] = usage_metadata(
            input_tokens, output_tokens, estimated=estimated, cached_input_tokens=cached_input_tokens, cost_usd=cost_usd
        )
        usage = pb.Usage(
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            estimated=estimated,
            cached_input_tokens=cached_input_tokens,
            cost_usd=cost_usd,
        )
        self.events.put(pb.TurnEvent(finish=pb.TurnFinish(finish_reason=finish_reason, usage=usage)))
        self._ended = True

    def error(self, error_class: str, message: str) -> None:
        self.step_finish()
        self.events.put(pb.TurnEvent(error=pb.TurnError(error_class=error_class, message=message)))
        self._ended = True

    def abort(self) -> None:
        """A user cancelled the turn: the stream ends with an abort (the turn is cancelled next)."""
        if self._ended:
            return
        self.cancelled = True
        self.step_finish()
        self.events.put(pb.TurnEvent(abort=pb.TurnAbort()))
        self._ended = True

    def text(self) -> str:
        """Every text the assistant message holds so far, joined."""
        pieces: list[str] = []
        for part in self.parts:
            if part["type"] == "text":
                text = self._text
                pieces.append("".join(text.pieces) if text is not None and text.part is part else part["text"])
        return "\n\n".join(piece for piece in pieces if piece)

    def ui_message(self) -> dict[str, Any]:
        """The assistant message as the AI SDK client reconstructs it from this stream."""
        self.text_end()
        parts = [{k: v for k, v in part.items() if k != "_id"} for part in self.parts]
        return {"id": self.message_id, "role": "assistant", "parts": parts, "metadata": dict(self.metadata)}
