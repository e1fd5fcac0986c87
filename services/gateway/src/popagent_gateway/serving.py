"""How the gateway is served: uvicorn with httptools, behind the edge's connection limits.

uvicorn (0.54) bounds only the idle time between requests (`timeout_keep_alive`). It has no
header-read timeout (a connection that sends nothing, or trickles its headers, is kept for ever),
no body-read timeout or minimum rate (a short body under a long Content-Length, or a chunked
body of one byte every few seconds, is kept for ever), and its `limit_concurrency` answers 503
only once a request's headers are complete, so stalled connections still pile up until the
process runs out of file descriptors. `GuardedHttpToolsProtocol` adds those limits to uvicorn's
own httptools protocol, at the connection, with one timer per connection:

- headers: from the connection's first moment (or the first byte after a keep-alive pause)
  the whole request head must arrive within `header_timeout_s`, however it trickles;
- head size: a request head past `max_head_bytes` is answered 431 and closed as soon as that
  many bytes arrived (httptools takes a head of any size: an 8 MiB header used to reach the
  app, and a few 40 MiB heads held the event loop for seconds while they were parsed);
- body: the body must arrive within `body_timeout_s` plus one second per `body_min_rate`
  bytes received (Apache mod_reqtimeout's `body=…,MinRate=…`); time the app is not reading
  (flow control paused, or a `100-continue` not yet sent) does not count against the client;
- idle: uvicorn's keep-alive timeout between requests (`idle_timeout_s`);
- connections: past `max_connections` open connections a new one is answered a 503 with
  `Retry-After` at once and closed, so the bound is reached long before the fd limit.

A request timed out before its response started is answered 408 and closed; one timed out
later is closed. Each kind of refusal is logged at most once per `LOG_EVERY_S`.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from dataclasses import dataclass
from types import FrameType
from typing import Any

import uvicorn
from fastapi import FastAPI
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger("popagent.gateway.edge")

LOG_EVERY_S = 60.0
# After a 431 the rest of the head is read and dropped for at most this long or this much, so a
# client still sending reads the answer (closing on unread bytes resets the connection, and TCP
# discards the answer with it); a client that sends on past either gets the reset.
LINGER_S = 1.0
LINGER_BYTES = 1024 * 1024
# File descriptors kept for everything but client connections (gRPC channels, store pools, logs).
FD_RESERVE = 256


@dataclass(frozen=True)
class EdgeLimits:
    header_timeout_s: float
    body_timeout_s: float
    body_min_rate: int
    idle_timeout_s: float
    max_connections: int
    max_head_bytes: int
    retry_after_s: int = 1


class RateLimitedLog:
    """One warning per kind per `every_s`, with how many were suppressed since the last one."""

    def __init__(self, logger: logging.Logger, every_s: float = LOG_EVERY_S) -> None:
        self.logger = logger
        self.every_s = every_s
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def warning(self, kind: str, message: str, *args: Any) -> None:
        now = time.monotonic()
        last = self._last.get(kind)
        if last is not None and now - last < self.every_s:
            self._suppressed[kind] = self._suppressed.get(kind, 0) + 1
            return
        self._last[kind] = now
        suppressed = self._suppressed.pop(kind, 0)
        suffix = f" ({suppressed} more since the last report)" if suppressed else ""
        self.logger.warning(message + suffix, *args)


def _raw_response(status: bytes, retry_after_s: int | None = None) -> bytes:
    body = b'{"error":"' + status.split(b" ", 1)[1].lower() + b'"}'
    head = [
        b"HTTP/1.1 " + status,
        b"content-type: application/json",
        b"content-length: " + str(len(body)).encode(),
        b"connection: close",
    ]
    if retry_after_s is not None:
        head.append(b"retry-after: " + str(retry_after_s).encode())
    return b"\r\n".join(head) + b"\r\n\r\n" + body


_HEADERS, _BODY, _RESPONSE, _IDLE, _REFUSED = range(5)


def guarded_protocol(limits: EdgeLimits) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol with `limits` enforced per connection."""
    refusals = RateLimitedLog(log)
    busy = _raw_response(b"503 Service Unavailable", limits.retry_after_s)
    timed_out = _raw_response(b"408 Request Timeout")
    head_too_large = _raw_response(b"431 Request Header Fields Too Large")

    class GuardedHttpToolsProtocol(HttpToolsProtocol):
        _phase = _HEADERS
        _timer: asyncio.TimerHandle | None = None
        _body_started = 0.0
        _body_received = 0
        _head_received = 0
        _head_tail = b""

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > limits.max_connections:
                refusals.warning(
                    "connections", "edge: %d connections open, refusing new ones with 503", limits.max_connections
                )
                transport.write(busy)
                transport.close()
                return
            self._arm(limits.header_timeout_s, self._header_timeout)

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._phase == _REFUSED:
                self._head_received += len(data)
                if self._head_received > LINGER_BYTES:
                    self.transport.close()
                return
            if self._phase == _IDLE:
                # A new request after a keep-alive pause: its head gets the header timeout.
                self._phase = _HEADERS
                self._head_received, self._head_tail = 0, b""
                self._arm(limits.header_timeout_s, self._header_timeout)
            elif self._phase == _BODY:
                self._body_received += len(data)
            if self._phase == _HEADERS:
                # Checked before parsing: one read can hold a whole head many times the bound.
                # Within the bound the head must end (its blank line), or it is refused.
                allowed = limits.max_head_bytes - self._head_received
                if len(data) > allowed and b"\r\n\r\n" not in self._head_tail + data[: max(allowed, 0)]:
                    refusals.warning("head", "edge: request head over %d bytes, answering 431", limits.max_head_bytes)
                    self._refuse_head()
                    return
                self._head_received += len(data)
                self._head_tail = (self._head_tail + data)[-3:]
            super().data_received(data)

        def _refuse_head(self) -> None:
            self._phase = _REFUSED
            self._head_received = 0
            if self.transport.is_closing():
                return
            self.transport.write(head_too_large)
            if self.transport.can_write_eof():
                self.transport.write_eof()
            self._arm(LINGER_S, self.transport.close)

        def on_headers_complete(self) -> None:
            self._phase = _BODY
            self._body_started = self.loop.time()
            self._body_received = 0
            self._arm(limits.body_timeout_s, self._body_check)
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            if self._phase == _BODY:
                self._phase = _RESPONSE
                self._disarm()
            super().on_message_complete()

        def on_response_complete(self) -> None:
            if self._phase != _HEADERS:
                self._phase = _IDLE
                self._disarm()
            super().on_response_complete()

        def _arm(self, delay_s: float, callback: Any) -> None:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = self.loop.call_later(delay_s, callback)

        def _disarm(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def _header_timeout(self) -> None:
            self._timer = None
            if self._phase == _HEADERS:
                refusals.warning("headers", "edge: request head not complete in %ss, closing", limits.header_timeout_s)
                self._close(answer=True)

        def _body_check(self) -> None:
            self._timer = None
            if self._phase != _BODY:
                return
            now = self.loop.time()
            cycle = self.cycle
            if self.flow.read_paused or (cycle is not None and cycle.waiting_for_100_continue):
                # The app is not reading: the client is not late. Start its clock again.
                self._body_started, self._body_received = now, 0
                self._arm(limits.body_timeout_s, self._body_check)
                return
            deadline = self._body_started + limits.body_timeout_s + self._body_received / limits.body_min_rate
            if now < deadline:
                self._arm(deadline - now, self._body_check)
                return
            refusals.warning(
                "body",
                "edge: request body slower than %d bytes/s after %ss, closing",
                limits.body_min_rate,
                limits.body_timeout_s,
            )
            self._close(answer=cycle is None or not cycle.response_started)

        def _close(self, *, answer: bool) -> None:
            if self.transport.is_closing():
                return
            if answer:
                self.transport.write(timed_out)
            if self.cycle is not None:
                self.cycle.disconnected = True
                self.cycle.message_event.set()
            self.transport.close()

    return GuardedHttpToolsProtocol


def usable_connections(wanted: int) -> int:
    """Raises this process's soft open-file limit to its hard one, and returns `wanted` capped
    so that client connections can never exhaust it (FD_RESERVE stays for everything else)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    usable = max(16, soft - FD_RESERVE)
    if wanted > usable:
        log.warning(
            "POPAGENT_GATEWAY_MAX_CONNECTIONS=%d is above what the open-file limit (%d) allows; using %d",
            wanted,
            soft,
            usable,
        )
        return usable
    return wanted


def server_config(app: Any, *, host: str, port: int, limits: EdgeLimits, **options: Any) -> uvicorn.Config:
    """The uvicorn configuration the gateway runs under (`python -m popagent_gateway` and test stacks)."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=guarded_protocol(limits),
        timeout_keep_alive=limits.idle_timeout_s,  # type: ignore[arg-type]  # a float works: it feeds call_later
        backlog=4096,
        log_config=None,
        access_log=False,
        **options,
    )


class GatewayServer(uvicorn.Server):
    """uvicorn's server, telling the app (`app.state.stopping`) as soon as it is told to stop: while
    its connections drain, a chat stream whose agent-runner stops too ends at once with an error
    chunk instead of waiting to follow the turn on (the whole stack is stopping)."""

    def __init__(self, config: uvicorn.Config, app: FastAPI) -> None:
        super().__init__(config)
        self.app = app

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.app.state.stopping = True
        super().handle_exit(sig, frame)
