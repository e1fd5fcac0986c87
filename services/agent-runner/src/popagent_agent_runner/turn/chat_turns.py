"""Chat turns in this process: started, queued, detached, cancelled and concluded (docs/turns.md).

    started = await turns.start(turn, policy, on_refused)   # a LiveTurn, Queued, or AlreadyRunning
    live = await turns.when_its_turn(turn)                   # a queued turn, once it runs

A turn is recorded as running (`TurnRecords`) and runs as its own task; every batch it streams goes
to the turn log (`TurnLog`), through the attached caller or, once the caller went away, through a
background drain. Its record's final status is written when its task ended and its last batch is
logged; that frees the session.

Double texting, when a turn runs (or waits) on the session, on this runner or another:
- `reject`: the caller's `on_refused(running turn id)` raises (the servicer's ABORTED);
- `enqueue`: the turn is recorded as queued, with what it will run, and waits, oldest first; it runs
  when the session is free even if its caller went away (continueOnDisconnect) and, if this runner
  dies, on the runner that adopts it (`adopt_queued`);
- `interrupt`: the running turn and every queued one are cancelled (the running one's answer so far
  is stored marked cancelled) and this one starts;
- `rollback`: the same, and the cancelled running turn's prompt and answer are dropped from the session.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from popagent.agent_runner.v1 import agent_runner_pb2 as pb
from popagent_agent_runner.context.events import TurnEvents, TurnOutput
from popagent_agent_runner.failures import TurnFailure
from popagent_agent_runner.turn.failure_texts import failure_text
from popagent_agent_runner.turn.log import TurnLog
from popagent_agent_runner.turn.peers import TurnControl
from popagent_agent_runner.turn.progress import TurnProgress
from popagent_agent_runner.turn.records import QueuedTurn, TurnRecord, TurnRecords, TurnStatus
from popagent_agent_runner.turn.runner import PreparedTurn, TurnEnd, TurnInput, TurnRunner
from popagent_agent_runner.turn.ui_message import UserMessage
from popagent_core.errors import FailedPrecondition, InvalidArgument, NotFound, PopagentError, Unavailable

logger = logging.getLogger(__name__)

DoubleTexting = Literal["reject", "enqueue", "interrupt", "rollback"]
DOUBLE_TEXTING: tuple[DoubleTexting, ...] = ("reject", "enqueue", "interrupt", "rollback")

# After the first text, at most one batch of turn events per this interval (see TurnEvents), and the
# model stream is read no more often. 50 ms is the render throttle the AI SDK suggests for `useChat`
# (`experimental_throttle`): a UI shows nothing finer, and each batch costs a gRPC message, a gateway
# wake-up and an SSE write.
BATCH_INTERVAL_S = 0.05
# The end of a stream whose turn this process stopped because it is shutting down and could not hand over.
SHUTDOWN_EVENT = pb.TurnEvent(error=pb.TurnError(error_class="shutdown", message=failure_text(TurnFailure.SHUTDOWN)))
# How long interrupted turns get to record themselves before the server stops.
INTERRUPT_WRITE_S = 2.0
# How often a turn waiting on a turn of another agent-runner asks again (a turn ending here wakes it at once).
REMOTE_TURN_POLL_S = 0.25
# How often a runner looks for queued turns that lost their runner and for running turns whose runner
# died (cheap statements): a stopping runner releases its queued turns, so they wait at most this long
# for another, and a lost turn runs again this long after its lease passed.
ADOPT_INTERVAL_S = 1.0
# A turn whose runner keeps dying (the turn itself may be the cause) is run at most this many times.
MAX_TURN_ATTEMPTS = 3


@dataclass(eq=False)
class LiveTurn:
    """A chat turn running in this process: its output, its task and how it ended."""

    turn_id: str
    session_id: str
    # The user message it answers: a rolled-back turn drops it and what follows it.
    prompt_id: str
    output: TurnOutput
    continue_on_disconnect: bool
    task: asyncio.Task[TurnEnd] | None = None
    # Cancelled by a newer turn under 'rollback': its messages go before the session is free.
    rollback: bool = False
    # Its runner stopped before it ended: another runner takes it over (it keeps its record and log open).
    handed_over: bool = False
    # Every batch went to the turn log (the attached call or the background drain took them all).
    logged: asyncio.Event = field(default_factory=asyncio.Event)
    # The record's final status is written: the session is free (the log's end marker follows).
    concluded: asyncio.Event = field(default_factory=asyncio.Event)

    def status(self) -> TurnStatus:
        """The record's final status of a turn whose task is done."""
        assert self.task is not None and self.task.done()
        if self.task.cancelled():
            return "cancelled" if self.output.cancelled else "interrupted"
        if self.task.exception() is not None or self.task.result().outcome == "failed":
            return "failed"
        return "completed"


@dataclass(frozen=True)
class Queued:
    """A turn recorded as queued: how many turns are ahead of it, and whether it runs without its caller."""

    ahead: int
    continue_on_disconnect: bool


@dataclass(frozen=True)
class AlreadyRunning:
    """The message was sent before and its turn runs: the send is followed, not run again."""

    turn_id: str


class QueuedTurnDropped(Exception):
    """A queued turn that will not run: it was cancelled (or superseded) while it waited."""


class ChatTurns:
    def __init__(self, *, runner: TurnRunner, records: TurnRecords, log: TurnLog, control: TurnControl) -> None:
        self.runner = runner
        self.records = records
        self.log = log
        self.control = control
        # False once the runner stops: no new turn starts here, and queued ones are left to others.
        self.taking_turns = True
        self._by_session: dict[str, LiveTurn] = {}
        self._by_id: dict[str, LiveTurn] = {}
        # Queued turns this process waits with (id → session).
        self._waiting: dict[str, str] = {}
        # Set (and replaced) whenever a turn here concludes: queued turns waiting here look again at once.
        self._turn_ended = asyncio.Event()
        # Background work of detached turns (waiting, draining to the log, concluding), kept until done.
        self._background: set[asyncio.Task[object]] = set()

    def held_turn_ids(self) -> list[str]:
        """The turns whose leases this runner keeps: those it runs and those it waits with."""
        return [*self._by_id, *self._waiting]

    def live(self, session_id: str, turn_id: str) -> LiveTurn | None:
        live = self._by_id.get(turn_id)
        return live if live is not None and live.session_id == session_id else None

    # Starting --------------------------------------------------------------------------

    async def start(
        self, turn: TurnInput, policy: DoubleTexting | None, on_refused: Callable[[str], Awaitable[None]]
    ) -> LiveTurn | Queued | AlreadyRunning:
        """Start the turn, or apply the double-texting policy (the request's, else the session's) when
        one runs or waits on the session. Raises what `prepare` raises before anything is recorded.

        The same message sent again while its turn runs (a gateway that tried the next runner after
        one died before answering, a client that retried) is that turn: `AlreadyRunning`, to follow."""
        prepared: PreparedTurn | None = None
        while True:
            if not self.taking_turns:
                raise Unavailable("this agent-runner is stopping and takes no new turn; send it to another")
            if self._by_session.get(turn.session_id) is None:
                prepared = await self.runner.prepare(turn)
                if self._by_session.get(turn.session_id) is None:  # no call started one here meanwhile
                    try:
                        started = await self.records.start(
                            turn.turn_id, turn.session_id, request=_turn_request(turn, prepared.message_id)
                        )
                    except asyncio.CancelledError:
                        # The caller went away while the record was written: it may stand, with no turn behind it.
                        self._in_background(self.records.finish(turn.turn_id, "interrupted"))
                        raise
                    if started:
                        return self._launch(prepared)
            ahead = await self._turns_ahead(turn.session_id)
            if not ahead:
                continue  # what ran ended meanwhile
            if (same := await self.records.running_for_message(turn.session_id, turn.message.id)) is not None:
                return AlreadyRunning(same)
            chosen = policy or _policy(await self.runner.threads.double_texting(turn.session_id))
            if chosen == "reject":
                await on_refused(ahead[0])
                raise AssertionError("on_refused raises")
            if chosen == "enqueue":
                # An unknown session or a bad request fails now, not when its time comes.
                prepared = prepared or await self.runner.prepare(turn)
                # Held from before its record exists, so `adopt_queued` never takes it for an orphan.
                self._waiting[turn.turn_id] = turn.session_id
                try:
                    waiting = await self.records.queue(turn.turn_id, turn.session_id, _turn_request(turn))
                except BaseException:
                    self._waiting.pop(turn.turn_id, None)
                    raise
                return Queued(waiting, prepared.state.snapshot.continue_on_disconnect)
            await self._supersede(turn.session_id, ahead, rollback=chosen == "rollback")

    async def _turns_ahead(self, session_id: str) -> list[str]:
        """The session's running turn (here or on another runner) and its queued ones, in order."""
        running = self._by_session.get(session_id)
        record = None if running is not None else await self.records.running(session_id)
        queued = [queued.id for queued in await self.records.queued(session_id)]
        head = running.turn_id if running is not None else record.id if record is not None else None
        return [head, *queued] if head is not None else queued

    async def _supersede(self, session_id: str, turn_ids: list[str], *, rollback: bool) -> None:
        """'interrupt' and 'rollback': cancel what runs and waits on the session. A turn that ended
        meanwhile is passed over. When nothing could be cancelled (a task's turn, which only its
        task's cancel stops, or a runner that does not answer, whose turn's lease passes if it is
        gone) the caller asks again after a pause."""
        cancelled = False
        for turn_id in turn_ids:
            try:
                await self.cancel(session_id, turn_id, rollback=rollback)
                cancelled = True
            except (NotFound, FailedPrecondition, Unavailable):
                continue
        if not cancelled:
            await asyncio.sleep(REMOTE_TURN_POLL_S)

    def _launch(self, prepared: PreparedTurn, progress: TurnProgress | None = None) -> LiveTurn:
        prepared = dataclasses.replace(prepared, fence=(prepared.input.turn_id, self.records.runner_id))
        turn = prepared.input
        output = TurnOutput(TurnEvents(BATCH_INTERVAL_S))
        live = LiveTurn(
            turn_id=turn.turn_id,
            session_id=turn.session_id,
            prompt_id=turn.message.id,
            output=output,
            continue_on_disconnect=prepared.state.snapshot.continue_on_disconnect,
        )

        async def run() -> TurnEnd:
            try:
                return await self.runner.run(prepared, output, progress)
            finally:
                output.events.close()

        async def store_progress(stored: dict[str, Any]) -> None:
            await self.records.progress(turn.turn_id, stored)

        output.store_progress = store_progress
        live.task = asyncio.create_task(run(), name=f"turn-{turn.turn_id}")
        self._by_session[turn.session_id] = self._by_id[turn.turn_id] = live
        self._in_background(self._conclude(live))
        return live

    # Queued turns ----------------------------------------------------------------------

    async def when_its_turn(self, turn: TurnInput) -> LiveTurn:
        """Wait until the queued turn may run (the oldest queued, none running), then start it.
        `QueuedTurnDropped` when it was cancelled meanwhile; `Unavailable` when this runner stops
        (the record stays queued, released for another runner to adopt)."""
        self._waiting[turn.turn_id] = turn.session_id
        try:
            while True:
                if not self.taking_turns:
                    # `interrupt_all` released what waited here when it ran; a turn whose caller left
                    # just then (out of `_waiting` until its detached wait starts) is released now.
                    await self._release_queued(turn.turn_id)
                    raise Unavailable("this agent-runner is stopping; the queued turn waits for another")
                if await self.records.start_queued(turn.turn_id, turn.session_id):
                    break
                record = await self.records.get(turn.session_id, turn.turn_id)
                if record is None or record.status != "queued":
                    raise QueuedTurnDropped(f"turn {turn.turn_id} was {record.status if record else 'removed'}")
                ended = self._turn_ended
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(ended.wait(), REMOTE_TURN_POLL_S)
        finally:
            self._waiting.pop(turn.turn_id, None)
        try:
            prepared = await self.runner.prepare(turn)
        except BaseException:
            # Its session went away (or the prompt no longer passes) while it waited.
            await self.records.finish(turn.turn_id, "failed")
            raise
        return self._launch(prepared)

    async def _release_queued(self, turn_id: str) -> None:
        """This runner stops: the queued turn goes to another runner now, not when its lease passes."""
        try:
            await self.records.release_queued([turn_id])
        except PopagentError as exc:
            logger.warning(
                "a queued turn not released; its lease will pass", extra={"turn_id": turn_id, "error": str(exc)}
            )

    def detach_queued(self, turn: TurnInput, queued: Queued) -> None:
        """The caller of a queued turn went away: it runs without one (continueOnDisconnect), else it is cancelled."""
        if queued.continue_on_disconnect:
            self._in_background(self._run_detached(turn))
        else:
            self._waiting.pop(turn.turn_id, None)
            self._in_background(self.records.cancel_queued(turn.turn_id, turn.session_id))

    async def _run_detached(self, turn: TurnInput) -> None:
        try:
            live = await self.when_its_turn(turn)
        except (QueuedTurnDropped, Unavailable):
            return
        except PopagentError as exc:
            logger.warning("a queued turn could not start", extra={"turn_id": turn.turn_id, "error": str(exc)})
            return
        await self.drain(live)

    async def adopt_queued(self) -> None:
        """Queued turns whose runner died (or this one, before it restarted) wait and run here."""
        for queued in await self.records.adopt_queued(self._waiting):
            try:
                turn = _stored_input(queued)
            except (InvalidArgument, KeyError, TypeError) as exc:
                logger.warning(
                    "a queued turn cannot be read; cancelled", extra={"turn_id": queued.id, "error": str(exc)}
                )
                await self.records.cancel_queued(queued.id, queued.session_id)
                continue
            logger.info("queued turn adopted", extra={"turn_id": queued.id, "session_id": queued.session_id})
            self._waiting[queued.id] = queued.session_id  # its lease is kept from now on
            self._in_background(self._run_detached(turn))

    async def take_over_lost(self) -> None:
        """Turns whose runner died go on here: from their last stored step, or from their prompt when
        they called no tool (the retried-prompt path: the placeholder answer is replaced). Lost turns
        that cannot be taken over end interrupted."""
        for lost in await self.records.take_over_lost(MAX_TURN_ATTEMPTS):
            logger.info("turn taken over from a lost runner", extra={"turn_id": lost.id, "session_id": lost.session_id})
            self._in_background(self._go_on(lost))

    async def _go_on(self, lost: QueuedTurn) -> None:
        try:
            turn = _stored_input(lost)
            progress = TurnProgress.from_json(lost.progress) if lost.progress is not None else None
            prepared = await self.runner.prepare(turn)
        except (PopagentError, KeyError, TypeError, ValueError) as exc:
            logger.warning("a turn taken over could not go on", extra={"turn_id": lost.id, "error": str(exc)})
            await self.records.finish(lost.id, "failed")
            return
        await self.drain(self._launch(prepared, progress))

    async def keep_adopting(self) -> None:
        """`adopt_queued` and `take_over_lost` at start and then every ADOPT_INTERVAL_S, until
        cancelled (or the runner stops)."""
        while self.taking_turns:
            try:
                await self.adopt_queued()
                await self.take_over_lost()
            except PopagentError as exc:
                logger.warning("queued or lost turns not taken", extra={"error": str(exc)})
            await asyncio.sleep(ADOPT_INTERVAL_S)

    # Streaming and ending --------------------------------------------------------------

    async def drain(self, live: LiveTurn) -> None:
        """A detached turn's batches go to the log only, until it ends."""
        if live.logged.is_set():
            return
        async for batch in live.output.events.batches():
            await self.log.append(live.turn_id, batch)
        live.logged.set()

    def detach(self, live: LiveTurn) -> None:
        """The caller of a running turn went away (or its call failed) while the turn still streams. A turn
        that waits for an approval runs on whatever continueOnDisconnect says: its stream ends there by
        design (docs/approvals.md), and the answer comes later, from anywhere."""
        if not live.continue_on_disconnect and not live.output.awaiting_approvals and live.task is not None:
            live.task.cancel()
        self._in_background(self.drain(live))

    async def _conclude(self, live: LiveTurn) -> None:
        """Once the turn ended and its last batch is logged: a rolled-back turn's messages dropped, the
        record's final status, the session free for its next turn, then the log's end marker (a NATS
        outage delays only the marker: followers also stop once the record says the turn ended)."""
        assert live.task is not None
        status: TurnStatus = "interrupted"
        try:
            await asyncio.wait([live.task])
            await live.logged.wait()
            status = live.status()
            # The log holds the whole turn before the record says it ended (followers stop then).
            await self.log.settle(live.turn_id)
            if live.handed_over:
                return
            try:
                if live.rollback and status == "cancelled":
                    await self.runner.threads.drop_turn(live.session_id, live.prompt_id)
                await self.records.finish(live.turn_id, status)
            except PopagentError as exc:
                # The lease passes and the next turn on the session marks it interrupted.
                logger.warning("turn status not stored", extra={"turn_id": live.turn_id, "error": str(exc)})
        finally:
            if self._by_session.get(live.session_id) is live:
                del self._by_session[live.session_id]
            self._by_id.pop(live.turn_id, None)
            live.concluded.set()
            self._turn_ended.set()
            self._turn_ended = asyncio.Event()
        if live.handed_over:
            await self.log.release(live.turn_id)
        else:
            await self.log.end(live.turn_id, status)

    def _in_background(self, work: Coroutine[Any, Any, object]) -> None:
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # Cancelling ------------------------------------------------------------------------

    async def cancel(self, session_id: str, turn_id: str, *, rollback: bool = False) -> TurnStatus:
        """Cancel the turn wherever it runs or waits; its final status."""
        live = self.live(session_id, turn_id)
        if live is not None:
            return await self._cancel(live, rollback=rollback)
        record = await self._cancellable(session_id, turn_id)
        if record.task_id is not None:
            raise FailedPrecondition(
                f"turn {turn_id} is an attempt of task {record.task_id}: cancel the task (POST /api/tasks/{record.task_id}/cancel)"
            )
        if record.status == "queued":
            if await self.records.cancel_queued(turn_id, session_id):
                return "cancelled"
            record = await self._cancellable(session_id, turn_id)  # it started meanwhile
        if record.runner_id == self.records.runner_id:
            return await self.cancel_here(session_id, turn_id, rollback=rollback)
        return await self.control.cancel(record.runner_id, session_id, turn_id, rollback=rollback)

    async def cancel_here(self, session_id: str, turn_id: str, *, rollback: bool = False) -> TurnStatus:
        """Cancel a turn this runner runs (a `TurnControl` command from another runner); its final status."""
        live = self.live(session_id, turn_id)
        if live is None:
            await self._cancellable(session_id, turn_id)
            raise FailedPrecondition(f"turn {turn_id} is not running on this agent-runner")
        return await self._cancel(live, rollback=rollback)

    async def _cancellable(self, session_id: str, turn_id: str) -> TurnRecord:
        record = await self.records.get(session_id, turn_id)
        if record is None:
            raise NotFound(f"no turn {turn_id!r} on session {session_id!r}")
        if record.status not in ("running", "queued") or (record.status == "running" and not record.leased):
            raise FailedPrecondition(f"turn {turn_id} already ended ({record.status})")
        return record

    async def _cancel(self, live: LiveTurn, *, rollback: bool) -> TurnStatus:
        assert live.task is not None
        if not live.task.done() and not live.output.cancelled:
            live.rollback = rollback
            live.output.abort()
            live.task.cancel()
        await live.concluded.wait()
        return live.status()

    # Shutdown --------------------------------------------------------------------------

    async def interrupt_all(self, grace_s: float) -> None:
        """Shutdown, before the server stops: turns that do not end within `grace_s` are handed over:
        cancelled here (what they streamed is stored marked interrupted, and their callers' calls end
        UNAVAILABLE, so gateways follow them on), then their leases released, so another runner takes
        them over at once from their last stored step. When the leases cannot be released they end
        here instead, their streams with an `error` event. Queued turns stay queued, released too."""
        self.taking_turns = False
        if self._waiting:
            try:
                await self.records.release_queued(list(self._waiting))
            except PopagentError as exc:
                logger.warning("queued turns not released; their leases will pass", extra={"error": str(exc)})
        tasks = [live.task for live in self._by_id.values() if live.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=grace_s)
        stopped = [live for live in self._by_id.values() if live.task is not None and not live.task.done()]
        if not stopped:
            return
        for live in stopped:
            live.handed_over = True
            assert live.task is not None
            live.task.cancel()
        await asyncio.wait(
            [asyncio.ensure_future(live.concluded.wait()) for live in stopped], timeout=INTERRUPT_WRITE_S
        )
        try:
            await self.records.release_running([live.turn_id for live in stopped])
        except PopagentError as exc:
            logger.warning("running turns not handed over; they end here", extra={"error": str(exc)})
            for live in stopped:
                await self.log.append(live.turn_id, pb.TurnEventBatch(events=[SHUTDOWN_EVENT]))
                with contextlib.suppress(PopagentError):
                    await self.records.finish(live.turn_id, "interrupted")
                await self.log.end(live.turn_id, "interrupted")


def parse_policy(value: str) -> DoubleTexting | None:
    """A request's double-texting policy; None (empty): the session's."""
    if not value:
        return None
    if value not in DOUBLE_TEXTING:
        raise InvalidArgument(f"double_texting must be one of {', '.join(DOUBLE_TEXTING)} (or empty)")
    return _policy(value)


def _policy(value: str) -> DoubleTexting:
    return next(policy for policy in DOUBLE_TEXTING if policy == value)


def _turn_request(turn: TurnInput, answer_id: str = "") -> dict[str, Any]:
    """What a turn keeps to run later or again, maybe on another runner (the model catalog is not
    kept: the check it allows is the gateway's at the time of the request)."""
    return {
        "message": turn.message.ui,
        "model": turn.model,
        "workspaceId": turn.workspace_id,
        "traceId": turn.trace_id,
        "answerId": answer_id,
    }


def _stored_input(stored: QueuedTurn) -> TurnInput:
    request = stored.request
    return TurnInput(
        session_id=stored.session_id,
        message=UserMessage.parse(orjson.dumps(request["message"]).decode()),
        model=str(request["model"]),
        workspace_id=str(request["workspaceId"]),
        turn_id=stored.id,
        trace_id=str(request["traceId"]),
        answer_id=str(request.get("answerId", "")),
    )
