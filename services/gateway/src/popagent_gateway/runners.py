"""Which agent-runner a session's turns go to: the runners that announced themselves lately
(docs/turns.md, Routing).

Every agent-runner announces its presence on NATS (`popagent_agent_runner.turn.peers`): its id, the
address to dial and whether it takes turns; it says so at once when it stops taking them. The
directory keeps the runners heard from within PRESENCE_EXPIRY_S and orders them for each session by
rendezvous hashing: a session goes to the same runner while the set stays the same (its parsed
history of the session stays warm there), and when a runner comes or goes only the sessions that
ranked it first move. A killed runner drops out at the expiry; until then a call to it fails at once
as UNAVAILABLE, and the caller passes over it (`pass_over`) to the next in the order.

Without NATS, and until a runner is heard from, the order is over the configured
POPAGENT_AGENT_RUNNER_ADDR workers, with a worker whose channel is failing put last.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import grpc
import orjson
from nats.aio.msg import Msg
from nats.errors import Error as NatsError

from popagent_core import subjects
from popagent_core.bus import connect

logger = logging.getLogger(__name__)

# Runners announce themselves every 2 s (popagent_agent_runner.turn.peers.PRESENCE_INTERVAL_S): one
# not heard from in three beats and a half is gone.
PRESENCE_EXPIRY_S = 7.0
# A channel to a runner that is gone is closed once it has been gone this long (no turn of it
# streams any more: a stopping runner ends its turns within seconds).
GONE_CHANNEL_S = 300.0
# How often expired runners are dropped and their channels closed.
SWEEP_INTERVAL_S = 1.0
# A broker that does not answer at start is tried again this often (the static workers serve meanwhile).
RECONNECT_S = 5.0


@dataclass
class _Presence:
    runner_id: str
    taking_turns: bool
    seen_at: float


def rendezvous(session_id: str, addresses: list[str]) -> list[str]:
    """`addresses` ordered for `session_id`, most preferred first (highest random weight hashing)."""

    def weight(address: str) -> bytes:
        return hashlib.blake2b(f"{session_id}\0{address}".encode(), digest_size=8).digest()

    return sorted(addresses, key=weight, reverse=True)


class RunnerDirectory:
    def __init__(
        self,
        *,
        static: list[tuple[str, grpc.aio.Channel]],
        make_channel: Callable[[str], grpc.aio.Channel],
        nats_url: str = "",
    ) -> None:
        self._static = dict(static)
        self._make_channel = make_channel
        self._nats_url = nats_url
        # Channels to announced runners, by address; the static workers' channels are the caller's.
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._live: dict[str, _Presence] = {}
        self._gone_since: dict[str, float] = {}
        self._listening: asyncio.Task[None] | None = None

    async def __aenter__(self) -> RunnerDirectory:
        if self._nats_url:
            self._listening = asyncio.create_task(self._listen(), name="runner-directory")
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._listening is not None:
            self._listening.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listening
        for channel in self._channels.values():
            await channel.close(grace=None)
        self._channels.clear()

    def live_runners(self) -> dict[str, str]:
        """The runners taking turns now: address → runner id."""
        now = time.monotonic()
        return {
            address: presence.runner_id
            for address, presence in self._live.items()
            if presence.taking_turns and now - presence.seen_at <= PRESENCE_EXPIRY_S
        }

    def candidates(self, session_id: str) -> list[tuple[str, grpc.aio.Channel]]:
        """Where `session_id`'s calls go, most preferred first: announced runners, else the static workers."""
        live = list(self.live_runners())
        if live:
            return [(address, self._channel(address)) for address in rendezvous(session_id, live)]
        ordered = [(address, self._static[address]) for address in rendezvous(session_id, list(self._static))]

        def failing(entry: tuple[str, grpc.aio.Channel]) -> bool:
            return entry[1].get_state(try_to_connect=True) is grpc.ChannelConnectivity.TRANSIENT_FAILURE

        return sorted(ordered, key=failing)  # stable: the order stays among the healthy ones

    def serving(self) -> list[tuple[str, grpc.aio.Channel]]:
        """The runners turns go to now: the announced ones taking turns, else the configured workers."""
        live = sorted(self.live_runners())
        if live:
            return [(address, self._channel(address)) for address in live]
        return list(self._static.items())

    def pass_over(self, address: str) -> None:
        """A call to `address` found nothing there: leave it out until it announces itself again."""
        self._live.pop(address, None)

    def _channel(self, address: str) -> grpc.aio.Channel:
        channel = self._static.get(address) or self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = self._make_channel(address)
        return channel

    def heard(self, payload: bytes) -> None:
        """One presence announcement; a malformed one is ignored."""
        try:
            presence = orjson.loads(payload)
            address, runner_id = str(presence["address"]), str(presence["runnerId"])
            taking_turns = bool(presence["takingTurns"])
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            logger.warning("malformed runner presence ignored", extra={"error": type(exc).__name__})
            return
        if address not in self._live and taking_turns:
            logger.info("agent-runner joined", extra={"runner": runner_id, "address": address})
        elif address in self._live and not taking_turns and self._live[address].taking_turns:
            logger.info("agent-runner leaving", extra={"runner": runner_id, "address": address})
        self._live[address] = _Presence(runner_id, taking_turns, time.monotonic())
        self._gone_since.pop(address, None)

    async def sweep(self) -> None:
        """Forget runners not heard from lately; close channels to runners gone for a while."""
        now = time.monotonic()
        for address, presence in list(self._live.items()):
            if now - presence.seen_at > PRESENCE_EXPIRY_S:
                del self._live[address]
                logger.info("agent-runner gone", extra={"runner": presence.runner_id, "address": address})
        for address in list(self._channels):
            if address in self._live:
                continue
            since = self._gone_since.setdefault(address, now)
            if now - since > GONE_CHANNEL_S:
                channel = self._channels.pop(address)
                del self._gone_since[address]
                await channel.close(grace=None)

    async def _listen(self) -> None:
        async def heard(msg: Msg) -> None:
            self.heard(msg.data)

        while True:
            try:
                async with connect(self._nats_url, name="gateway", connect_timeout_s=RECONNECT_S) as nc:
                    await nc.subscribe(subjects.RUNNER_PRESENCE, cb=heard)
                    await nc.publish(subjects.RUNNER_PRESENCE_ASK, b"")
                    while True:
                        await asyncio.sleep(SWEEP_INTERVAL_S)
                        await self.sweep()
            except (ConnectionError, NatsError) as exc:
                logger.warning(
                    "runner presence not followed; turns go to POPAGENT_AGENT_RUNNER_ADDR",
                    extra={"error": str(exc)},
                )
                self._live.clear()
                await asyncio.sleep(RECONNECT_S)
