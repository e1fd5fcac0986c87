"""Negative feedback as an outcome event on NATS (`popagent.observability.feedback.given`).

The gateway owns no table, so it has no outbox: a service writes its fact and its event in
one transaction and a relay delivers it later; the gateway's feedback row lives in the
observability store, which has no relay and must never hold the application's events. So
the gateway publishes directly and waits for JetStream's acknowledgement (the stream stored
the event). When NATS does not acknowledge in time, the route removes the feedback it just
stored and answers 503: the user retries, and the feedback is never kept without its event.
The feedback id is the message id, so a retried publish within the stream's duplicate window
is stored once.

Connected on first use, not at start: chat and every other route work without NATS here.
"""

from __future__ import annotations

import asyncio
import contextlib

import nats
import orjson
from nats.aio.client import Client as NatsClient
from nats.errors import Error as NatsError

from popagent_core import subjects
from popagent_core.bus import ensure_streams
from popagent_core.errors import Unavailable
from popagent_core.subjects import inbox_prefix
from popagent_core.telemetry import inject_headers

CONNECT_TIMEOUT_S = 2.0


class FeedbackEvents:
    def __init__(self, nats_url: str, *, ack_timeout_s: float, stream_replicas: int = 1) -> None:
        self.nats_url = nats_url
        self.ack_timeout_s = ack_timeout_s
        self.stream_replicas = stream_replicas
        self._client: NatsClient | None = None
        self._connecting = asyncio.Lock()

    async def _connected(self) -> NatsClient:
        async with self._connecting:
            if self._client is None or self._client.is_closed:
                client = await nats.connect(
                    self.nats_url.split(","),
                    name="popagent-gateway",
                    # The gateway's NATS user may subscribe to its own replies only.
                    inbox_prefix=inbox_prefix("gateway"),
                    connect_timeout=CONNECT_TIMEOUT_S,
                    allow_reconnect=True,
                    max_reconnect_attempts=-1,
                    reconnect_time_wait=0.5,
                )
                try:
                    await ensure_streams(
                        client.jetstream(timeout=self.ack_timeout_s), ("observability",), replicas=self.stream_replicas
                    )
                except BaseException:
                    await client.close()
                    raise
                self._client = client
            return self._client

    async def negative_feedback_given(self, event: dict[str, object], *, feedback_id: str) -> None:
        """Publish and wait for the stream's acknowledgement; `Unavailable` when it does not come."""
        if not self.nats_url:
            raise Unavailable("NATS_URL is not set: negative feedback cannot be published")
        try:
            client = await asyncio.wait_for(self._connected(), CONNECT_TIMEOUT_S * 2)
            await client.jetstream(timeout=self.ack_timeout_s).publish(
                subjects.NEGATIVE_FEEDBACK_GIVEN,
                orjson.dumps(event),
                headers=inject_headers({"Nats-Msg-Id": feedback_id}),
            )
        except (OSError, TimeoutError, NatsError) as exc:
            raise Unavailable(f"the event bus did not take the feedback event ({type(exc).__name__})") from exc

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None and not client.is_closed:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.drain(), 3)
