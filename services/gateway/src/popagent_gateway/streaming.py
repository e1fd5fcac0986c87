"""Agent-runner turn events -> AI SDK UI message stream v1 over SSE.

The gateway alone knows HTTP and the UI protocol. Each gRPC message from the runner is
a batch of typed events; each batch becomes one write of one or more SSE `data:`
lines, so the per-token cost stays off this hop. Chunks are pydantic-ai's AI SDK
chunk models (`pydantic_ai.ui.vercel_ai.response_types`), not hand-written JSON.

The stream is ai 6's (what ai 7 reads too) unless the client says it is ai 5 (the
`x-popagent-ai-sdk` header, routes/chat.py): ai 5's chunk schema has no tool approval chunks and
fails the whole stream on one, so a tool approval request and a denial are rendered as chunks it
knows (`Ai5Approvals`). Only the rendering differs; the turn and its stored message do not.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable

import grpc
import orjson
from pydantic_ai.ui.vercel_ai import response_types as chunks

from popagent.agent_runner.v1 import agent_runner_pb2
from popagent_gateway.errors import client_message

logger = logging.getLogger(__name__)

UI_STREAM_HEADERS = {
    "x-vercel-ai-ui-message-stream": "v1",
    "cache-control": "no-cache",
    "x-accel-buffering": "no",
}
DONE = b"data: [DONE]\n\n"
# An SSE comment, which every event-stream parser (the AI SDK's included) skips: sent when a stream
# has been quiet this long, so no proxy or load balancer between here and the client that closes an
# idle connection (nginx's `proxy_read_timeout`, a cloud load balancer's idle timeout: 60 s by
# default) closes a turn whose model, or whose tool, is silent for minutes.
HEARTBEAT = b": keep-alive\n\n"
HEARTBEAT_S = 15.0
AI_SDK_VERSION = 6


def _json(text: str) -> object:
    return orjson.loads(text) if text else None


def chunks_for(event: agent_runner_pb2.TurnEvent, turn_id: str) -> Iterable[chunks.BaseChunk]:
    """The UI chunks of one runner event (usually one; none for an empty event)."""
    kind = event.WhichOneof("event")
    if kind == "start":
        yield chunks.StartChunk(
            message_id=event.start.message_id,
            message_metadata={
                "turnId": event.start.turn_id,
                "model": event.start.model,
                **({"traceId": event.start.trace_id} if event.start.trace_id else {}),
            },
        )
    elif kind == "step_start":
        yield chunks.StartStepChunk()
    elif kind == "text_start":
        yield chunks.TextStartChunk(id=event.text_start.part_id)
    elif kind == "text_delta":
        yield chunks.TextDeltaChunk(id=event.text_delta.part_id, delta=event.text_delta.delta)
    elif kind == "text_end":
        yield chunks.TextEndChunk(id=event.text_end.part_id)
    elif kind == "tool_input":
        yield chunks.ToolInputStartChunk(
            tool_call_id=event.tool_input.tool_call_id, tool_name=event.tool_input.tool_name
        )
        yield chunks.ToolInputAvailableChunk(
            tool_call_id=event.tool_input.tool_call_id,
            tool_name=event.tool_input.tool_name,
            input=_json(event.tool_input.input_json) or {},
        )
    elif kind == "tool_output":
        output = event.tool_output
        if output.is_error:
            error = _json(output.output_json)
            yield chunks.ToolOutputErrorChunk(
                tool_call_id=output.tool_call_id, error_text=error if isinstance(error, str) else str(error)
            )
        else:
            yield chunks.ToolOutputAvailableChunk(tool_call_id=output.tool_call_id, output=_json(output.output_json))
    elif kind == "approval_request":
        yield chunks.ToolApprovalRequestChunk(
            approval_id=event.approval_request.approval_id, tool_call_id=event.approval_request.tool_call_id
        )
    elif kind == "tool_denied":
        yield chunks.ToolOutputDeniedChunk(tool_call_id=event.tool_denied.tool_call_id)
    elif kind == "agent_activity":
        yield chunks.DataChunk(
            type="data-agentActivity", id=event.agent_activity.activity_id, data=_json(event.agent_activity.data_json)
        )
    elif kind == "step_finish":
        yield chunks.FinishStepChunk()
    elif kind == "finish":
        usage = event.finish.usage
        yield chunks.FinishChunk(
            finish_reason=event.finish.finish_reason or "stop",  # type: ignore[arg-type]
            message_metadata={
                "turnId": turn_id,
                "usage": {
                    "inputTokens": usage.input_tokens,
                    "outputTokens": usage.output_tokens,
                    **({"cachedInputTokens": usage.cached_input_tokens} if usage.cached_input_tokens else {}),
                    **({"costUsd": usage.cost_usd} if usage.HasField("cost_usd") else {}),
                    **({"estimated": True} if usage.estimated else {}),
                },
            },
        )
    elif kind == "error":
        yield chunks.ErrorChunk(error_text=event.error.message or event.error.error_class)
    elif kind == "abort":
        yield chunks.AbortChunk()


def queued_chunk(queued: agent_runner_pb2.TurnQueued) -> bytes:
    """A turn that waits behind others on its session: a transient data chunk (the AI SDK hands it to
    `onData` and keeps it out of the message), sent without an SSE id: it is not one of the turn's own
    chunks, which its log numbers from `start`."""
    chunk = chunks.DataChunk(
        type="data-turnQueued", data={"turnId": queued.turn_id, "ahead": queued.ahead}, transient=True
    )
    return b"data: %s\n\n" % chunk.encode(AI_SDK_VERSION).encode()


class Ai5Approvals:
    """How an ai 5 client sees tool approvals: a request as a text part of its own that says what waits
    and how to answer it (ai 5 cannot answer in the stream: the person answers through the UI or
    `POST /api/approvals/{id}`), a denial as the call's `tool-output-error`. A request names the tool,
    which only the call's earlier `tool_input` event carries, so the names are kept here."""

    def __init__(self) -> None:
        self.tool_names: dict[str, str] = {}

    def request(self, request: agent_runner_pb2.ToolApprovalRequest) -> list[chunks.BaseChunk]:
        part_id = f"approval-{request.approval_id}"
        tool = self.tool_names.get(request.tool_call_id)
        what = f"The tool {tool}" if tool else "A tool"
        # The reason is a sentence of its own (the policy's, or a hook's words).
        reason = request.reason.strip()
        why = f" Reason: {reason}{'' if reason.endswith(('.', '!', '?')) else '.'}" if reason else ""
        text = (
            f"{what} (call {request.tool_call_id}) waits for a person's approval.{why} "
            f"Approval id: {request.approval_id}. Approve or deny it in the popagent UI or with "
            f"POST /api/approvals/{request.approval_id} "
            '({"decision": "approve" | "approve-session" | "deny", "reason": "..."}); '
            "the turn goes on once it is answered."
        )
        return [
            chunks.TextStartChunk(id=part_id),
            chunks.TextDeltaChunk(id=part_id, delta=text),
            chunks.TextEndChunk(id=part_id),
        ]

    @staticmethod
    def denied(denied: agent_runner_pb2.ToolDenied) -> chunks.BaseChunk:
        # The runner's reason says who denied it and why (or that nobody answered in time).
        why = denied.reason or "no reason given"
        return chunks.ToolOutputErrorChunk(
            tool_call_id=denied.tool_call_id, error_text=f"Denied (approval {denied.approval_id}): {why}"
        )


class UIStreamEncoder:
    """Numbers every chunk of a turn (the SSE event id, from 0), so a client that resumes with
    `Last-Event-ID: N` gets the chunks after N: the same bytes an uninterrupted stream sent. The
    numbering is the turn's, from its first event: a replay from the turn log counts the same.
    Stateful in the turn id, which the finish chunk's metadata repeats, and in the count.

    `ai_sdk` is the client's AI SDK major: 5 gets tool approvals rendered by `Ai5Approvals`, under the
    same numbers (a request is one number in every major), so `Last-Event-ID` means the same chunk."""

    def __init__(self, first_id: int = 0, *, after_approvals: Iterable[str] = (), ai_sdk: int = AI_SDK_VERSION) -> None:
        self.turn_id = ""
        # Chunks numbered below this are counted, not sent (they reached the client before).
        self.first_id = first_id
        self.next_id = 0
        # A client that answered these approvals has the turn up to their requests: chunks are counted,
        # not sent, until the last of those requests has passed (the turn's `start` is always sent).
        self.withheld = set(after_approvals)
        # The approvals requested in the chunks the last `encode` sent.
        self.requested: list[str] = []
        self.version = 5 if ai_sdk == 5 else AI_SDK_VERSION
        self.ai5 = Ai5Approvals() if ai_sdk == 5 else None

    def encode(self, batch: agent_runner_pb2.TurnEventBatch) -> bytes:
        lines: list[bytes] = []
        self.requested = []
        ai5, version = self.ai5, self.version
        for event in batch.events:
            kind = event.WhichOneof("event")
            if kind == "queued":
                lines.append(queued_chunk(event.queued))
                continue
            if kind == "start":
                if self.turn_id:
                    # The turn begins again (another runner took it over: docs/turns.md, Takeover): it
                    # is sent from here even to a client that had more chunks of the lost attempt than
                    # its log kept (the lost runner's last batches may never have reached the log).
                    self.first_id = min(self.first_id, self.next_id)
                self.turn_id = event.start.turn_id
            elif kind == "approval_request":
                self._approval_request(event, lines)
                continue
            elif ai5 is not None and kind == "tool_input":
                ai5.tool_names[event.tool_input.tool_call_id] = event.tool_input.tool_name
            rendered = (
                (ai5.denied(event.tool_denied),)
                if ai5 is not None and kind == "tool_denied"
                else chunks_for(event, self.turn_id)
            )
            for chunk in rendered:
                chunk_id = self.next_id
                self.next_id += 1
                if self.withheld and kind != "start":
                    continue
                if chunk_id >= self.first_id:
                    lines.append(b"id: %d\ndata: %s\n\n" % (chunk_id, chunk.encode(version).encode()))
        return b"".join(lines)

    def _approval_request(self, event: agent_runner_pb2.TurnEvent, lines: list[bytes]) -> None:
        """One number for the request in every major. ai 5's several chunks for it share that number, on
        the last of them only: a client cut off inside them has the number before, so a resume sends all
        of them again, never a text part without its start; and a client that got the last one resumes
        after all of them. The numbers of the turn's other chunks do not depend on the major."""
        request = event.approval_request
        chunk_id = self.next_id
        self.next_id += 1
        if self.withheld:
            # The client that answered this request has it: the chunks after it are its to get.
            self.withheld.discard(request.approval_id)
            return
        if chunk_id < self.first_id:
            return
        rendered = list(chunks_for(event, self.turn_id)) if self.ai5 is None else self.ai5.request(request)
        *before, last = rendered
        lines.extend(b"data: %s\n\n" % chunk.encode(self.version).encode() for chunk in before)
        lines.append(b"id: %d\ndata: %s\n\n" % (chunk_id, last.encode(self.version).encode()))
        self.requested.append(request.approval_id)


def paused_for_approval(turn_id: str) -> bytes:
    """The end of a stream whose turn waits for a person (docs/approvals.md): a `finish` (sent without an
    SSE id: the turn goes on, and its chunks keep their numbers), so an AI SDK client is ready to answer
    with `addToolApprovalResponse`; the turn keeps running and waiting."""
    chunk = chunks.FinishChunk(
        finish_reason="tool-calls", message_metadata={"turnId": turn_id, "awaitingApproval": True}
    )
    return b"data: %s\n\n" % chunk.encode(AI_SDK_VERSION).encode() + DONE


# Whether any of these approvals still waits for an answer.
PendingCheck = Callable[[list[str]], Awaitable[bool]]
Batches = AsyncIterator[agent_runner_pb2.TurnEventBatch]
# The turn followed from its log: the call, its batches and the first (None: the turn no longer runs).
Followed = tuple[grpc.aio.Call, Batches, agent_runner_pb2.TurnEventBatch | None]


async def with_heartbeats(
    body: AsyncGenerator[bytes, None], interval_s: float = HEARTBEAT_S
) -> AsyncGenerator[bytes, None]:
    """`body`, with a `HEARTBEAT` after every `interval_s` in which it yielded nothing. Closing this
    generator (the client went away) cancels the read in flight and closes `body`."""
    nxt: asyncio.Future[bytes] | None = None
    try:
        while True:
            if nxt is None:
                nxt = asyncio.ensure_future(anext(body))
            done, _ = await asyncio.wait((nxt,), timeout=interval_s)
            if not done:
                yield HEARTBEAT
                continue
            read, nxt = nxt, None
            try:
                data = read.result()
            except StopAsyncIteration:
                return
            yield data
    finally:
        if nxt is not None:
            nxt.cancel()
            with contextlib.suppress(BaseException):
                await nxt
        await body.aclose()


def sse_body(
    first: agent_runner_pb2.TurnEventBatch,
    rest: Batches,
    call: grpc.aio.Call,
    *,
    first_id: int = 0,
    after_approvals: Iterable[str] = (),
    pending: PendingCheck | None = None,
    resume: Callable[[], Awaitable[Followed | None]] | None = None,
    ai_sdk: int = AI_SDK_VERSION,
) -> AsyncIterator[bytes]:
    """The SSE body of a turn (`_turn_chunks`), kept alive through quiet stretches (`with_heartbeats`)."""
    return with_heartbeats(
        _turn_chunks(
            first,
            rest,
            call,
            first_id=first_id,
            after_approvals=after_approvals,
            pending=pending,
            resume=resume,
            ai_sdk=ai_sdk,
        )
    )


async def _turn_chunks(
    first: agent_runner_pb2.TurnEventBatch,
    rest: Batches,
    call: grpc.aio.Call,
    *,
    first_id: int = 0,
    after_approvals: Iterable[str] = (),
    pending: PendingCheck | None = None,
    resume: Callable[[], Awaitable[Followed | None]] | None = None,
    ai_sdk: int = AI_SDK_VERSION,
) -> AsyncGenerator[bytes, None]:
    """The SSE body: the already-read first batch, every later batch, then [DONE]; chunks
    numbered below `first_id` left out (a resumed stream), and with `after_approvals` everything up to
    those approvals' requests but the `start` (the client that answered them has it). With `pending`, the
    stream ends after a tool approval request that still waits for its answer (`paused_for_approval`).
    `ai_sdk` is the client's AI SDK major (`UIStreamEncoder`).

    With `resume`, a stream whose runner went away (UNAVAILABLE: killed, cut off) goes on from the
    turn's log (`resume` follows it through another runner) after the chunks already sent. Any other
    failure after the stream started becomes an error chunk (the HTTP status is already sent). When
    the client goes away the generator is closed and the runner's call is cancelled: a chat turn then
    runs on by the agent-runtime setting continueOnDisconnect, a followed turn is not touched.
    """
    encoder = UIStreamEncoder(first_id, after_approvals=after_approvals, ai_sdk=ai_sdk)
    try:
        yield encoder.encode(first)
        if pending is not None and encoder.requested and await pending(encoder.requested):
            yield paused_for_approval(encoder.turn_id)
            return
        async for batch in rest:
            data = encoder.encode(batch)
            if data:
                yield data
            if pending is not None and encoder.requested and await pending(encoder.requested):
                yield paused_for_approval(encoder.turn_id)
                return
        yield DONE
    except grpc.aio.AioRpcError as exc:
        # (A client that went away cancels this generator, never an AioRpcError: a CANCELLED
        # status is the service cancelling the call, e.g. while it stops. The client still
        # gets a terminal chunk.)
        followed = await _follow(resume) if exc.code() is grpc.StatusCode.UNAVAILABLE else None
        if followed is None:
            logger.warning("turn stream failed", extra={"code": exc.code().name})
            yield error_stream(client_message(exc.code(), exc.details() or ""))
            return
        async for data in _followed_rest(followed, sent=encoder.next_id, ai_sdk=ai_sdk):
            yield data
    finally:
        call.cancel()


async def _follow(resume: Callable[[], Awaitable[Followed | None]] | None) -> Followed | None:
    """The turn followed from its log, when it still runs and a runner follows it; else None."""
    if resume is None:
        return None
    try:
        followed = await resume()
    except grpc.aio.AioRpcError as exc:
        logger.warning("turn could not be followed after its runner went away", extra={"code": exc.code().name})
        return None
    if followed is None or followed[2] is None:
        return None
    return followed


async def _followed_rest(followed: Followed, *, sent: int, ai_sdk: int) -> AsyncIterator[bytes]:
    """The rest of a followed turn after the `sent` chunks the client has; [DONE] at its end."""
    call, batches, first = followed
    encoder = UIStreamEncoder(first_id=sent, ai_sdk=ai_sdk)
    try:
        assert first is not None
        yield encoder.encode(first)
        async for batch in batches:
            data = encoder.encode(batch)
            if data:
                yield data
        yield DONE
    except grpc.aio.AioRpcError as exc:
        logger.warning("followed turn stream failed", extra={"code": exc.code().name})
        yield error_stream(client_message(exc.code(), exc.details() or ""))
    finally:
        call.cancel()


def error_stream(message: str) -> bytes:
    """A stream that failed after it started: an error chunk the UI shows, then [DONE]."""
    return b"data: " + chunks.ErrorChunk(error_text=message).encode(AI_SDK_VERSION).encode() + b"\n\n" + DONE
