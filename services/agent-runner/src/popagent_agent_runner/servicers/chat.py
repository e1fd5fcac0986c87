"""AgentRunnerService: chat turns (`ChatTurns`: durable records, streamed live and from their log)
and the long-term memories.

`Chat` prepares the turn first, so an unknown session or a refused request is an error status
before anything is streamed (the gateway answers 404/400). While the caller is attached this call
hands it every batch of events, each of which also goes to the turn log. When the caller goes away
gRPC cancels this call: with the agent-runtime setting `continueOnDisconnect` (the default) the turn
runs on to its end, its batches going to the log only; without it the turn is cancelled with the
call. A turn that waits behind others ("enqueue") starts its stream with a `queued` event.
`FollowTurn` serves a session's running turn from its log, so a reloaded page or a second tab sees
the same turn. `CancelTurn` is the one way a user stops a turn (running or queued), whichever runner
holds it. A runner that is stopping takes no new turn (UNAVAILABLE: the gateway sends it to another).

Double texting (`ChatTurns.start`): "reject" answers ABORTED with the running turn's id in the
`popagent-running-turn-id` trailer (the gateway's 409); "enqueue", "interrupt" and "rollback" are
the turn module's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import grpc

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from popagent.agent_runner.v1 import agent_runner_pb2_grpc
from popagent_agent_runner.memory.long_term import Memory, MemoryStore
from popagent_agent_runner.servicers.messages import message_of
from popagent_agent_runner.turn.chat_turns import (
    AlreadyRunning,
    ChatTurns,
    LiveTurn,
    Queued,
    QueuedTurnDropped,
    parse_policy,
)
from popagent_agent_runner.turn.runner import TurnInput
from popagent_agent_runner.turn.ui_message import UserMessage
from popagent_core.errors import Conflict, InvalidArgument, Unavailable

logger = logging.getLogger(__name__)


def memory_message(memory: Memory) -> pb.Memory:
    return message_of(pb.Memory, memory)


# The end of a followed stream whose turn lost its runner (killed, cut off) before it ended.
RUNNER_LOST_TEXT = "The turn was interrupted: the agent-runner running it stopped before the turn ended."
# How long a follower of a turn whose runner's lease passed waits for another runner to take it over
# (runners look for lost turns every second: chat_turns.ADOPT_INTERVAL_S).
TAKEOVER_WAIT_S = 2.5
# How often it looks meanwhile (the log is not read while it looks).
TAKEOVER_POLL_S = 0.1
# The trailer naming the running turn when a chat turn is refused by the "reject" policy.
RUNNING_TURN_TRAILER = "popagent-running-turn-id"


class ChatServicer(agent_runner_pb2_grpc.AgentRunnerServiceServicer):
    def __init__(self, *, turns: ChatTurns, memories: MemoryStore) -> None:
        self.turns = turns
        self.records = turns.records
        self.log = turns.log
        self.memories = memories

    async def Chat(  # type: ignore[override]
        self, request: pb.ChatRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.TurnEventBatch]:
        if not request.session_id:
            raise InvalidArgument("session_id is required")
        policy = parse_policy(request.double_texting)
        turn = TurnInput(
            session_id=request.session_id,
            message=UserMessage.parse(request.message_json),
            model=request.model,
            workspace_id=request.workspace_id,
            listed_models=frozenset(request.listed_models) if request.check_models else None,
        )

        async def refuse(running_turn_id: str) -> None:
            context.set_trailing_metadata(((RUNNING_TURN_TRAILER, running_turn_id),))
            raise Conflict(
                f"a turn is already running on session {turn.session_id!r} (turn {running_turn_id}); send again "
                "when it ends, or send with doubleTexting 'enqueue', 'interrupt' or 'rollback'"
            )

        started = await self.turns.start(turn, policy, refuse)
        if isinstance(started, AlreadyRunning):
            async for batch in self._follow(request.session_id):
                yield batch
            return
        if isinstance(started, Queued):
            try:
                yield pb.TurnEventBatch(
                    events=[pb.TurnEvent(queued=pb.TurnQueued(turn_id=turn.turn_id, ahead=started.ahead))]
                )
                live = await self.turns.when_its_turn(turn)
            except QueuedTurnDropped:
                yield pb.TurnEventBatch(events=[pb.TurnEvent(abort=pb.TurnAbort())])
                return
            except (asyncio.CancelledError, GeneratorExit):
                # The caller went away while the turn waited: it stays queued, and runs without it.
                self.turns.detach_queued(turn, started)
                raise
        else:
            live = started
        async for batch in self._attached(live):
            yield batch

    async def _attached(self, live: LiveTurn) -> AsyncIterator[pb.TurnEventBatch]:
        attached = True
        try:
            async for batch in live.output.events.batches():
                await self.log.append(live.turn_id, batch)
                yield batch
            live.logged.set()
            attached = False
            await live.concluded.wait()
            assert live.task is not None
            if live.handed_over:
                raise Unavailable("this agent-runner stopped before the turn ended; another takes it over")
            if live.task.cancelled():
                # Cancelled by a user (the stream ended with an abort) or by a shutdown (with its error).
                return
            live.task.result()
        finally:
            if attached:
                # The caller went away (or the call failed) while the turn still streams.
                self.turns.detach(live)

    async def FollowTurn(  # type: ignore[override]
        self, request: pb.FollowTurnRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.TurnEventBatch]:
        if not request.session_id:
            raise InvalidArgument("session_id is required")
        async for batch in self._follow(request.session_id):
            yield batch

    async def _follow(self, session_id: str) -> AsyncIterator[pb.TurnEventBatch]:
        """The session's running turn from its log, live until it ends; nothing when none runs."""
        record = await self.records.following(session_id)
        if record is None:
            return

        async def still_running() -> bool:
            current = await self.records.get(session_id, record.id)
            if current is None or current.status != "running":
                return False
            if current.leased:
                return True
            # Its runner's lease passed: another runner takes it over in a moment, or ends it.
            deadline = asyncio.get_running_loop().time() + TAKEOVER_WAIT_S
            while asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(TAKEOVER_POLL_S)
                current = await self.records.get(session_id, record.id)
                if current is None or current.status != "running":
                    return False
                if current.leased:
                    return True
            return False

        ended: list[str] = []
        async for batch in self.log.follow(
            record.id, running=still_running, idle_check_s=self.records.lease_s / 3, on_end=ended.append
        ):
            yield batch
        if ended:
            return
        # The log ended without its end marker because the turn no longer runs.
        current = await self.records.get(session_id, record.id)
        if current is not None and (current.status == "interrupted" or current.status == "running"):
            # Its runner was lost (killed, cut off) and no other could go on with it.
            yield pb.TurnEventBatch(
                events=[pb.TurnEvent(error=pb.TurnError(error_class="interrupted", message=RUNNER_LOST_TEXT))]
            )

    async def CancelTurn(
        self, request: pb.CancelTurnRequest, context: grpc.aio.ServicerContext
    ) -> pb.CancelTurnResponse:
        if not request.session_id or not request.turn_id:
            raise InvalidArgument("session_id and turn_id are required")
        status = await self.turns.cancel(request.session_id, request.turn_id)
        return pb.CancelTurnResponse(turn_id=request.turn_id, status=status)

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
