"""AgentRunnerService: chat turns as durable records, streamed live and from their log, and the
long-term memories.

`Chat` prepares the turn first, so an unknown session or a refused request is an error
status before anything is streamed (the gateway answers 404/400). The turn is then recorded
as running (`TurnRecords`) and runs as its own task; while the caller is attached this call
hands it every batch of events, and every batch also goes to the turn log (`TurnLog`). When the
caller goes away gRPC cancels this call: with the agent-runtime setting `continueOnDisconnect`
(the default) the turn runs on to its end, its batches going to the log only; without it the
turn is cancelled with the call. `FollowTurn` serves a session's running turn from its log, so
a reloaded page or a second tab sees the same turn. `CancelTurn` is the one way a user stops a
turn: its stream ends with an abort event and its answer so far is stored marked cancelled.

Double texting: while a chat turn runs on a session, another one sent to it is refused
(ABORTED, the running turn's id in the `popagent-running-turn-id` trailer; the gateway answers
409) or, with the session's `double_texting` set to "enqueue", waits for it to end. A turn
running on another agent-runner counts too (the record says so).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass, field
from typing import Any

import grpc

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from popagent.agent_runner.v1 import agent_runner_pb2_grpc
from popagent_agent_runner.context.events import TurnEvents, TurnOutput
from popagent_agent_runner.failures import TurnFailure
from popagent_agent_runner.memory.long_term import Memory, MemoryStore
from popagent_agent_runner.servicers.messages import message_of
from popagent_agent_runner.turn.failure_texts import failure_text
from popagent_agent_runner.turn.log import TurnLog
from popagent_agent_runner.turn.records import TurnRecords, TurnStatus
from popagent_agent_runner.turn.runner import PreparedTurn, TurnEnd, TurnInput, TurnRunner
from popagent_agent_runner.turn.ui_message import UserMessage
from popagent_core.errors import Conflict, FailedPrecondition, InvalidArgument, NotFound, PopagentError

logger = logging.getLogger(__name__)

# After the first text, at most one batch of turn events per this interval (see TurnEvents), and the
# model stream is read no more often. 50 ms is the render throttle the AI SDK suggests for `useChat`
# (`experimental_throttle`): a UI shows nothing finer, and each batch costs a gRPC message, a gateway
# wake-up and an SSE write.
BATCH_INTERVAL_S = 0.05


def memory_message(memory: Memory) -> pb.Memory:
    return message_of(pb.Memory, memory)


# The end of a stream whose turn this process stopped because it is shutting down.
SHUTDOWN_TEXT = failure_text(TurnFailure.SHUTDOWN)
# The end of a followed stream whose turn lost its runner (killed, cut off) before it ended.
RUNNER_LOST_TEXT = "The turn was interrupted: the agent-runner running it stopped before the turn ended."
# How long interrupted turns get to record themselves before the server stops.
INTERRUPT_WRITE_S = 2.0
# How often a turn refused because it runs on another agent-runner asks again ("enqueue").
REMOTE_TURN_POLL_S = 0.25


# The trailer naming the running turn when a chat turn is refused by the "reject" policy.
RUNNING_TURN_TRAILER = "popagent-running-turn-id"


@dataclass(eq=False)
class _LiveTurn:
    """A chat turn running in this process: its output, its task and how it ended."""

    turn_id: str
    session_id: str
    output: TurnOutput
    continue_on_disconnect: bool
    task: asyncio.Task[TurnEnd] | None = None
    # Every batch went to the turn log (the attached call or the background drain took them all).
    logged: asyncio.Event = field(default_factory=asyncio.Event)
    # The record's final status is written: the session is free (the log's end marker follows).
    concluded: asyncio.Event = field(default_factory=asyncio.Event)


class ChatServicer(agent_runner_pb2_grpc.AgentRunnerServiceServicer):
    def __init__(self, *, runner: TurnRunner, memories: MemoryStore, records: TurnRecords, log: TurnLog) -> None:
        self.runner = runner
        self.memories = memories
        self.records = records
        self.log = log
        # Double texting: the turn running on each session here; another waits ("enqueue") or is refused.
        self._by_session: dict[str, _LiveTurn] = {}
        self._by_id: dict[str, _LiveTurn] = {}
        # Background work of detached turns (draining to the log, concluding), kept until done.
        self._background: set[asyncio.Task[object]] = set()

    def running_turn_ids(self) -> list[str]:
        return list(self._by_id)

    async def interrupt_all(self, grace_s: float) -> None:
        """Shutdown, before the server stops: turns that do not end within `grace_s` end
        their streams with an `error` event (a terminal chunk for every client) and are
        cancelled, which stores what they streamed marked interrupted."""
        tasks = [live.task for live in self._by_id.values() if live.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=grace_s)
        stopped = [live for live in self._by_id.values() if live.task is not None and not live.task.done()]
        for live in stopped:
            live.output.error("shutdown", SHUTDOWN_TEXT)
            assert live.task is not None
            live.task.cancel()
        if stopped:
            await asyncio.wait(
                [asyncio.ensure_future(live.concluded.wait()) for live in stopped], timeout=INTERRUPT_WRITE_S
            )

    async def Chat(  # type: ignore[override]
        self, request: pb.ChatRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.TurnEventBatch]:
        if not request.session_id:
            raise InvalidArgument("session_id is required")
        turn = TurnInput(
            session_id=request.session_id,
            message=UserMessage.parse(request.message_json),
            model=request.model,
            workspace_id=request.workspace_id,
            listed_models=frozenset(request.listed_models) if request.check_models else None,
        )
        live = await self._start(turn, context)
        attached = True
        try:
            async for batch in live.output.events.batches():
                await self.log.append(live.turn_id, batch)
                yield batch
            live.logged.set()
            attached = False
            await live.concluded.wait()
            assert live.task is not None
            if live.task.cancelled():
                # Cancelled by a user (the stream ended with an abort) or by a shutdown (with its error).
                return
            live.task.result()
        finally:
            if attached:
                # The caller went away (or the call failed) while the turn still streams.
                if not live.continue_on_disconnect and live.task is not None:
                    live.task.cancel()
                self._in_background(self._drain(live))

    async def _start(self, turn: TurnInput, context: grpc.aio.ServicerContext) -> _LiveTurn:
        """Wait for or refuse a running turn (double texting), prepare this one, record it and start it."""
        while True:
            running = self._by_session.get(turn.session_id)
            if running is not None:
                await self._double_texting(turn.session_id, running.turn_id, context)
                await running.concluded.wait()
                continue
            prepared = await self.runner.prepare(turn)
            if self._by_session.get(turn.session_id) is not None:
                continue  # another call started a turn here while this one prepared
            try:
                started = await self.records.start(turn.turn_id, turn.session_id)
            except asyncio.CancelledError:
                # The caller went away while the record was written: it may stand, with no turn behind it.
                self._in_background(self.records.finish(turn.turn_id, "interrupted"))
                raise
            if started:
                return self._launch(prepared)
            remote = await self.records.running(turn.session_id)
            if remote is not None:
                await self._double_texting(turn.session_id, remote.id, context)
            await asyncio.sleep(REMOTE_TURN_POLL_S)

    async def _double_texting(self, session_id: str, running_turn_id: str, context: grpc.aio.ServicerContext) -> None:
        """Return to wait for the running turn ("enqueue"), or refuse this one ("reject")."""
        if await self.runner.threads.double_texting(session_id) == "reject":
            context.set_trailing_metadata(((RUNNING_TURN_TRAILER, running_turn_id),))
            raise Conflict(
                f"a turn is already running on session {session_id!r} (turn {running_turn_id}); "
                "send again when it ends, or set the session's doubleTexting to 'enqueue'"
            )

    def _launch(self, prepared: PreparedTurn) -> _LiveTurn:
        turn = prepared.input
        output = TurnOutput(TurnEvents(BATCH_INTERVAL_S))
        live = _LiveTurn(
            turn_id=turn.turn_id,
            session_id=turn.session_id,
            output=output,
            continue_on_disconnect=prepared.state.snapshot.continue_on_disconnect,
        )

        async def run() -> TurnEnd:
            try:
                return await self.runner.run(prepared, output)
            finally:
                output.events.close()

        live.task = asyncio.create_task(run(), name=f"turn-{turn.turn_id}")
        self._by_session[turn.session_id] = self._by_id[turn.turn_id] = live
        self._in_background(self._conclude(live))
        return live

    async def _drain(self, live: _LiveTurn) -> None:
        """A detached turn's batches go to the log only, until it ends."""
        if live.logged.is_set():
            return
        async for batch in live.output.events.batches():
            await self.log.append(live.turn_id, batch)
        live.logged.set()

    async def _conclude(self, live: _LiveTurn) -> None:
        """Once the turn ended and its last batch is logged: the record's final status, the session
        free for its next turn, then the log's end marker (a NATS outage delays only the marker:
        followers also stop once the record says the turn ended)."""
        assert live.task is not None
        status: TurnStatus = "interrupted"
        try:
            await asyncio.wait([live.task])
            await live.logged.wait()
            status = _status(live)
            try:
                await self.records.finish(live.turn_id, status)
            except PopagentError as exc:
                # The lease passes and the next turn on the session marks it interrupted.
                logger.warning("turn status not stored", extra={"turn_id": live.turn_id, "error": str(exc)})
        finally:
            if self._by_session.get(live.session_id) is live:
                del self._by_session[live.session_id]
            self._by_id.pop(live.turn_id, None)
            live.concluded.set()
        await self.log.end(live.turn_id, status)

    def _in_background(self, work: Coroutine[Any, Any, object]) -> None:
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def FollowTurn(  # type: ignore[override]
        self, request: pb.FollowTurnRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.TurnEventBatch]:
        if not request.session_id:
            raise InvalidArgument("session_id is required")
        record = await self.records.running(request.session_id)
        if record is None:
            return

        async def still_running() -> bool:
            current = await self.records.get(request.session_id, record.id)
            return current is not None and current.status == "running" and current.leased

        async for batch in self.log.follow(record.id, running=still_running, idle_check_s=self.records.lease_s / 3):
            yield batch
        # The log ended with its end marker, or without one because the turn no longer runs.
        current = await self.records.get(request.session_id, record.id)
        if current is not None and current.status == "running" and not current.leased:
            # Its runner lost the lease (killed, cut off): the turn will not go on.
            yield pb.TurnEventBatch(
                events=[pb.TurnEvent(error=pb.TurnError(error_class="interrupted", message=RUNNER_LOST_TEXT))]
            )

    async def CancelTurn(
        self, request: pb.CancelTurnRequest, context: grpc.aio.ServicerContext
    ) -> pb.CancelTurnResponse:
        if not request.session_id or not request.turn_id:
            raise InvalidArgument("session_id and turn_id are required")
        live = self._by_id.get(request.turn_id)
        if live is None or live.session_id != request.session_id:
            record = await self.records.get(request.session_id, request.turn_id)
            if record is None:
                raise NotFound(f"no turn {request.turn_id!r} on session {request.session_id!r}")
            if record.status != "running" or not record.leased:
                raise FailedPrecondition(f"turn {request.turn_id} already ended ({record.status})")
            raise FailedPrecondition(
                f"turn {request.turn_id} runs on another agent-runner ({record.runner_id}); send the cancel there"
            )
        assert live.task is not None
        if not live.task.done() and not live.output.cancelled:
            live.output.abort()
            live.task.cancel()
        await live.concluded.wait()
        return pb.CancelTurnResponse(turn_id=live.turn_id, status=_status(live))

    async def ListMemories(
        self, request: pb.ListMemoriesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListMemoriesResponse:
        memories = await self.memories.list(request.query, request.limit or 200)
        return pb.ListMemoriesResponse(memories=[memory_message(m) for m in memories])

    async def CreateMemory(
        self, request: pb.CreateMemoryRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateMemoryResponse:
        memory, created = await self.memories.create(
            request.content, source="user", kind=request.kind or "fact", pinned=request.pinned
        )
        return pb.CreateMemoryResponse(memory=memory_message(memory), created=created)

    async def UpdateMemory(self, request: pb.UpdateMemoryRequest, context: grpc.aio.ServicerContext) -> pb.Memory:
        memory = await self.memories.update(
            request.id,
            request.content if request.HasField("content") else None,
            kind=request.kind if request.HasField("kind") else None,
            pinned=request.pinned if request.HasField("pinned") else None,
        )
        return memory_message(memory)

    async def DeleteMemory(
        self, request: pb.DeleteMemoryRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteMemoryResponse:
        await self.memories.delete(request.id)
        return pb.DeleteMemoryResponse()


def _status(live: _LiveTurn) -> TurnStatus:
    """The record's final status of a turn whose task is done."""
    assert live.task is not None and live.task.done()
    if live.task.cancelled():
        return "cancelled" if live.output.cancelled else "interrupted"
    if live.task.exception() is not None or live.task.result().outcome == "failed":
        return "failed"
    return "completed"
