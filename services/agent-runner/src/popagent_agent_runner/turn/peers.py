"""How agent-runner processes are found and reach each other, over core NATS (docs/turns.md, Routing).

Presence: a runner announces itself on `popagent_runner_presence` (its id, the address its clients
dial, whether it still takes turns) when it starts, every PRESENCE_INTERVAL_S, whenever a gateway
asks (`popagent_runner_presence_ask`, so a gateway that starts need not wait a beat) and once more
when it stops taking turns. Gateways route turns to the runners they heard from lately, so runners
can be started and stopped while the stack runs; no list of runner addresses is needed for turns.

Turn control: a command for a turn (cancel) goes to the runner holding it, whose id the turn's
record names, as a NATS request on `popagent_turn_control.<runner key>`: only that runner listens
there. Core NATS, not JetStream: a command for a runner that is gone has no one to answer it, which
is the answer (its lease passes and the turn ends as interrupted).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import AsyncIterator
from typing import Protocol, cast

import grpc
import orjson
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.errors import Error as NatsError
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from popagent_agent_runner.turn.records import TURN_STATUSES, TurnStatus
from popagent_core import subjects
from popagent_core.errors import PopagentError, Unavailable, from_grpc_code

logger = logging.getLogger(__name__)


class CancelHere(Protocol):
    async def __call__(self, session_id: str, turn_id: str, *, rollback: bool = False) -> TurnStatus: ...


# A gateway forgets a runner it has not heard from in three beats (popagent_gateway.runners).
PRESENCE_INTERVAL_S = 2.0
# A runner that holds a turn answers a command at once; one that does not answer in this long is
# taken as gone.
CONTROL_TIMEOUT_S = 5.0


def control_subject(runner_id: str) -> str:
    """The subject only `runner_id` listens on for commands (its id may hold dots and colons)."""
    return f"{subjects.TURN_CONTROL_PREFIX}.{hashlib.sha256(runner_id.encode()).hexdigest()[:20]}"


class RunnerPresence:
    """This runner's announcements: up while it takes turns, leaving once it stops taking them."""

    def __init__(self, nats: NatsClient, *, runner_id: str, address: str) -> None:
        self.nats = nats
        self.runner_id = runner_id
        self.address = address
        self.taking_turns = True

    async def announce(self) -> None:
        payload = {"runnerId": self.runner_id, "address": self.address, "takingTurns": self.taking_turns}
        try:
            await self.nats.publish(subjects.RUNNER_PRESENCE, orjson.dumps(payload))
        except NatsError as exc:
            logger.warning("runner presence not announced", extra={"error": type(exc).__name__})

    async def leave(self) -> None:
        """Stop being offered turns (announced at once); turns already running go on."""
        self.taking_turns = False
        await self.announce()
        # Out before the server's drain begins: a core publish only queues the message.
        with contextlib.suppress(NatsError, TimeoutError):
            await self.nats.flush(timeout=1)

    @contextlib.asynccontextmanager
    async def announcing(self) -> AsyncIterator[None]:
        async def asked(_msg: Msg) -> None:
            await self.announce()

        async def beat() -> None:
            while True:
                await self.announce()
                await asyncio.sleep(PRESENCE_INTERVAL_S)

        asking = await self.nats.subscribe(subjects.RUNNER_PRESENCE_ASK, cb=asked)
        beating = asyncio.create_task(beat(), name="runner-presence")
        try:
            yield
        finally:
            beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beating
            with contextlib.suppress(Exception):
                await asking.unsubscribe()


class TurnControl:
    """Commands for turns, answered by the runner that holds each."""

    def __init__(self, nats: NatsClient, *, runner_id: str, timeout_s: float = CONTROL_TIMEOUT_S) -> None:
        self.nats = nats
        self.runner_id = runner_id
        self.timeout_s = timeout_s

    @contextlib.asynccontextmanager
    async def serving(self, cancel: CancelHere) -> AsyncIterator[None]:
        """Answer cancel commands for this runner's turns with `cancel(session_id, turn_id, rollback=…)`:
        the turn's final status, or the error (its gRPC code and message) that call raised."""

        async def handle(msg: Msg) -> None:
            try:
                command = orjson.loads(msg.data)
                status = await cancel(
                    str(command["sessionId"]), str(command["turnId"]), rollback=bool(command.get("rollback"))
                )
                answer: dict[str, str] = {"status": status}
            except PopagentError as exc:
                answer = {"code": exc.grpc_code.name, "error": exc.message}
            except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
                answer = {"code": "INVALID_ARGUMENT", "error": f"malformed turn command ({type(exc).__name__})"}
            with contextlib.suppress(NatsError):
                await msg.respond(orjson.dumps(answer))

        subscription = await self.nats.subscribe(control_subject(self.runner_id), cb=handle)
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                await subscription.unsubscribe()

    async def cancel(self, runner_id: str, session_id: str, turn_id: str, *, rollback: bool = False) -> TurnStatus:
        """Ask `runner_id` to cancel its turn (and with `rollback`, to drop its messages); its final
        status, or the error it answered."""
        command = orjson.dumps({"sessionId": session_id, "turnId": turn_id, "rollback": rollback})
        try:
            reply = await self.nats.request(control_subject(runner_id), command, timeout=self.timeout_s)
        except (NoRespondersError, NatsTimeoutError) as exc:
            raise Unavailable(
                f"the agent-runner running turn {turn_id} ({runner_id}) does not answer; "
                "if it is gone, the turn ends as interrupted when its lease passes"
            ) from exc
        except NatsError as exc:
            raise Unavailable(f"turn {turn_id} could not be reached over NATS ({type(exc).__name__})") from exc
        answer = orjson.loads(reply.data)
        if answer.get("status") in TURN_STATUSES:
            return cast(TurnStatus, answer["status"])
        code = getattr(grpc.StatusCode, str(answer.get("code", "")), grpc.StatusCode.INTERNAL)
        raise from_grpc_code(code, str(answer.get("error", "")))
