"""AgentRunnerService: the chat turn as a stream of event batches, and the long-term memories.

`Chat` prepares the turn first, so an unknown session or a refused request is an error
status before anything is streamed (the gateway answers 404/400). The turn then runs as
its own task while this call hands every batch of queued events to gRPC; when the caller
goes away gRPC cancels this call, and the turn is cancelled with it.

Double texting: while a chat turn runs on a session, another one sent to it is refused
(ABORTED, the running turn's id in the `popagent-running-turn-id` trailer; the gateway answers
409) or, with the session's `double_texting` set to "enqueue", waits for it to end.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import grpc

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from popagent.agent_runner.v1 import agent_runner_pb2_grpc
from popagent_agent_runner.context.events import TurnEvents, TurnOutput
from popagent_agent_runner.failures import TurnFailure
from popagent_agent_runner.memory.long_term import Memory, MemoryStore
from popagent_agent_runner.servicers.messages import message_of
from popagent_agent_runner.turn.failure_texts import failure_text
from popagent_agent_runner.turn.runner import TurnInput, TurnRunner
from popagent_agent_runner.turn.ui_message import UserMessage
from popagent_core.errors import Conflict, InvalidArgument

# After the first text, at most one batch of turn events per this interval (see TurnEvents), and the
# model stream is read no more often. 50 ms is the render throttle the AI SDK suggests for `useChat`
# (`experimental_throttle`): a UI shows nothing finer, and each batch costs a gRPC message, a gateway
# wake-up and an SSE write.
BATCH_INTERVAL_S = 0.05


def memory_message(memory: Memory) -> pb.Memory:
    return message_of(pb.Memory, memory)


# The end of a stream whose turn this process stopped because it is shutting down.
SHUTDOWN_TEXT = failure_text(TurnFailure.SHUTDOWN)
# How long interrupted turns get to record themselves before the server stops.
INTERRUPT_WRITE_S = 2.0


# The trailer naming the running turn when a chat turn is refused by the "reject" policy.
RUNNING_TURN_TRAILER = "popagent-running-turn-id"


@dataclass
class _SessionTurn:
    """The chat turn running on a session in this process (a session's turns all run on one worker)."""

    turn_id: str
    done: asyncio.Event = field(default_factory=asyncio.Event)


class ChatServicer(agent_runner_pb2_grpc.AgentRunnerServiceServicer):
    def __init__(self, runner: TurnRunner, memories: MemoryStore) -> None:
        self.runner = runner
        self.memories = memories
        # Double texting: the turn running on each session; another waits ("enqueue") or is refused ("reject").
        self._by_session: dict[str, _SessionTurn] = {}
        # Each running turn and its output; the turns a shutdown interrupted.
        self._turns: dict[asyncio.Task[None], TurnOutput] = {}
        self._interrupted: set[asyncio.Task[None]] = set()

    async def interrupt_all(self, grace_s: float) -> None:
        """Shutdown, before the server stops: turns that do not end within `grace_s` end
        their streams with an `error` event (a terminal chunk for every client) and are
        cancelled, which stores what they streamed marked interrupted."""
        if self._turns:
            await asyncio.wait(set(self._turns), timeout=grace_s)
        stopped = [task for task in self._turns if not task.done()]
        for task in stopped:
            self._turns[task].error("shutdown", SHUTDOWN_TEXT)
            self._interrupted.add(task)
            task.cancel()
        if stopped:
            await asyncio.wait(stopped, timeout=INTERRUPT_WRITE_S)

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
        while (running := self._by_session.get(turn.session_id)) is not None:
            if await self.runner.threads.double_texting(turn.session_id) == "reject":
                context.set_trailing_metadata(((RUNNING_TURN_TRAILER, running.turn_id),))
                raise Conflict(
                    f"a turn is already running on session {turn.session_id!r} (turn {running.turn_id}); "
                    "send again when it ends, or set the session's doubleTexting to 'enqueue'"
                )
            await running.done.wait()
        mine = self._by_session[turn.session_id] = _SessionTurn(turn.turn_id)
        try:
            async for batch in self._turn(turn):
                yield batch
        finally:
            if self._by_session.get(turn.session_id) is mine:
                del self._by_session[turn.session_id]
            mine.done.set()

    async def _turn(self, turn: TurnInput) -> AsyncIterator[pb.TurnEventBatch]:
        prepared = await self.runner.prepare(turn)
        events = TurnEvents(BATCH_INTERVAL_S)
        output = TurnOutput(events)

        async def run() -> None:
            try:
                await self.runner.run(prepared, output)
            finally:
                events.close()

        task = asyncio.create_task(run(), name=f"turn-{turn.turn_id}")
        self._turns[task] = output
        try:
            async for batch in events.batches():
                yield batch
            if task in self._interrupted:
                # Its stream already ended with the shutdown's error event.
                return
            await task
        finally:
            self._turns.pop(task, None)
            self._interrupted.discard(task)
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

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
