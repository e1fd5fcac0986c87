"""A lean HTTP/1.1 transport for the model client: httpx's interface, asyncio streams underneath.

Why (docs/decisions/lean-model-transport.md; `bench/chat.py` checks it): a model streams one small
SSE chunk every few milliseconds, so every chunk is its own socket read. Through httpx's default
transport each read crosses httpcore, h11 and anyio (a cancel scope per read for the timeout), which
costs many times the chunk's own parsing and saturates agent-runner's core at a few dozen concurrent
chats. This transport reads straight from an asyncio `Protocol`'s buffer and keeps httpx's API, so the lean model, its error mapping and its tests see an
ordinary `httpx.AsyncClient`.

What it does: HTTP/1.1 with keep-alive connections pooled per origin, `Content-Length`,
chunked and close-delimited bodies, `http` and `https`, a connect timeout and an idle read
timeout (no bytes for that long), and a request on a pooled connection the server had
already closed is sent again once on a new one. Failures are raised as httpx's own
exceptions (`ConnectError`, `ConnectTimeout`, `ReadError`, `ReadTimeout`,
`RemoteProtocolError`). No proxies, no HTTP/2, no upgrades: it is for one OpenAI-compatible
server.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ssl
from collections.abc import AsyncIterator
from typing import cast

import httpx

from popagent_agent_runner.llm.wire import PACE_READS

MAX_HEAD_BYTES = 64 * 1024
MAX_IDLE_PER_ORIGIN = 100
_CRLF = b"\r\n"


class _Connection(asyncio.Protocol):
    """One connection: bytes received wait in a buffer until a reader takes them."""

    def __init__(self, loop: asyncio.AbstractEventLoop, read_timeout_s: float | None) -> None:
        self.loop = loop
        self.read_timeout_s = read_timeout_s
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.closed = False
        self.error: BaseException | None = None
        self.reused = False
        self._waiter: asyncio.Future[None] | None = None
        self._last_data = loop.time()
        self._watchdog: asyncio.TimerHandle | None = None
        self._timed_out = False
        # Read pacing (see `pace`): the interval, the bytes whose arrival is handed on at once, and
        # the timer that ends the current interval (none: the next bytes are handed on as they come).
        self._pace_s = 0.0
        self._wake_on = b""
        self._tick: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol --------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self._last_data = self.loop.time()
        if self._pace_s and not self._holds_end(len(data)):
            if self._tick is not None:
                return  # handed on when the interval ends
            self._tick = self.loop.call_later(self._pace_s, self._tick_over)
        self._wake()

    def eof_received(self) -> bool:
        self.closed = True
        self._wake()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if exc is not None and self.error is None:
            self.error = exc
        self._stop_watchdog()
        self._stop_pacing()
        self._wake()

    # -- read pacing ---------------------------------------------------------------------

    def pace(self, interval_s: float, wake_on: bytes = b"") -> None:
        """Hand received bytes to the reader at most once per `interval_s` from now on (0: as they
        arrive), until the connection is pooled; bytes that end the body, or that hold `wake_on`,
        are handed on at once.

        A model streams a small chunk every few ms, and every wake-up of the reader costs a pass
        through the body's readers, the SSE decoder and the turn. A turn forwards its text in batches
        anyway (`TurnEvents`), so once the first text went out, handing it on at that pace loses the
        user nothing. Its end is another matter: the turn's last text, its `finish` and the next
        step all wait for it, so it never waits for the interval. The socket itself is read as
        bytes arrive, which is the only way to see the end come.
        """
        self._pace_s = interval_s
        self._wake_on = wake_on
        if not interval_s and self._tick is not None:
            self._tick.cancel()
            self._tick = None
            if self.buffer:
                self._wake()

    def _holds_end(self, received: int) -> bool:
        """Whether the bytes just received end a chunked body or hold the `wake_on` marker.

        A body that only looks ended (a payload ending in `0\r\n`) is handed on early, nothing worse."""
        buffer = self.buffer
        if buffer.endswith(b"0\r\n\r\n"):
            return True
        marker = self._wake_on
        return bool(marker) and buffer.find(marker, max(0, len(buffer) - received - len(marker) + 1)) >= 0

    def _tick_over(self) -> None:
        self._tick = None
        if self.buffer and self._waiter is not None:
            # What arrived during the interval goes now, and opens the next interval (a reader
            # not waiting takes the buffer itself when it comes back).
            self._tick = self.loop.call_later(self._pace_s, self._tick_over)
            self._wake()

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- the idle read timeout: one timer per wait, not per byte ---------------------------

    def _check_idle(self) -> None:
        self._watchdog = None
        assert self.read_timeout_s is not None
        idle = self.loop.time() - self._last_data
        if idle >= self.read_timeout_s:
            self._timed_out = True
            self.abort()
        else:
            self._watchdog = self.loop.call_later(self.read_timeout_s - idle, self._check_idle)

    def _stop_watchdog(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None

    async def more(self) -> None:
        """Wait for more bytes; ReadError/ReadTimeout when the connection ends first."""
        if self.closed:
            raise self._ended()
        if self.read_timeout_s is not None and self._watchdog is None:
            self._last_data = self.loop.time()
            self._watchdog = self.loop.call_later(self.read_timeout_s, self._check_idle)
        self._waiter = self.loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None
        if self.closed and not self.buffer:
            raise self._ended()

    def _ended(self) -> httpx.TransportError:
        if self._timed_out:
            return httpx.ReadTimeout("no data from the model server within the read timeout")
        return httpx.ReadError(str(self.error) if self.error else "the server closed the connection")

    # -- reading -----------------------------------------------------------------------

    async def read_head(self) -> bytes:
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end >= 0:
                head = bytes(self.buffer[:end])
                del self.buffer[: end + 4]
                return head
            if len(self.buffer) > MAX_HEAD_BYTES:
                raise httpx.RemoteProtocolError("response head too large")
            await self.more()

    async def read_line(self) -> bytes:
        while True:
            end = self.buffer.find(_CRLF)
            if end >= 0:
                line = bytes(self.buffer[:end])
                del self.buffer[: end + 2]
                return line
            if len(self.buffer) > MAX_HEAD_BYTES:
                raise httpx.RemoteProtocolError("chunk size line too long")
            await self.more()

    async def read_some(self) -> bytes:
        """What is buffered, or the next bytes to arrive; b"" once the server closed."""
        if not self.buffer:
            if self.closed:
                return b""
            try:
                await self.more()
            except httpx.ReadError:
                if self._timed_out:
                    raise
                return b""
        data = bytes(self.buffer)
        self.buffer.clear()
        return data

    def write(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)

    def idle(self) -> None:
        self._stop_watchdog()
        self._stop_pacing()

    def _stop_pacing(self) -> None:
        self._pace_s = 0.0
        self._wake_on = b""
        if self._tick is not None:
            self._tick.cancel()
            self._tick = None

    def abort(self) -> None:
        self.closed = True
        self._stop_watchdog()
        self._stop_pacing()
        if self.transport is not None:
            self.transport.abort()
        self._wake()


def _take_chunks(buffer: bytearray) -> tuple[list[bytes], bool]:
    """The payloads of the complete chunks at the start of `buffer` (removed from it), and whether the
    last chunk (size 0) was among them; a partial chunk stays for the next read."""
    pieces: list[bytes] = []
    start = 0
    ended = False
    while True:
        end = buffer.find(_CRLF, start)
        if end < 0:
            if len(buffer) - start > MAX_HEAD_BYTES:
                raise httpx.RemoteProtocolError("chunk size line too long")
            break
        try:
            size = int(bytes(buffer[start:end]).split(b";", 1)[0], 16)
        except ValueError:
            raise httpx.RemoteProtocolError(f"bad chunk size {bytes(buffer[start : start + 20])!r}") from None
        if size == 0:
            start = end + 2
            ended = True
            break
        data_end = end + 2 + size
        if len(buffer) < data_end + 2:
            break
        pieces.append(bytes(buffer[end + 2 : data_end]))
        start = data_end + 2
    del buffer[:start]
    return pieces, ended


class _Body(httpx.AsyncByteStream):
    """A response body; the connection goes back to the pool once it was read to the end."""

    def __init__(
        self,
        transport: LeanTransport,
        key: tuple[str, str, int],
        conn: _Connection,
        framing: str,
        length: int,
        keep_alive: bool,
    ) -> None:
        self._transport = transport
        self._key = key
        self._conn: _Connection | None = conn
        self._framing = framing
        self._length = length
        self._keep_alive = keep_alive
        self._done = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        conn = self._conn
        if conn is None:
            raise httpx.StreamClosed()
        if self._framing == "length":
            remaining = self._length
            while remaining > 0:
                if not conn.buffer:
                    await conn.more()
                data = bytes(conn.buffer[:remaining])
                del conn.buffer[: len(data)]
                remaining -= len(data)
                yield data
        elif self._framing == "chunked":
            # Every complete chunk buffered is handed on as one piece: a paced read (or a busy loop)
            # finds several SSE events waiting, and they then cost one pass through the readers.
            while True:
                pieces, ended = _take_chunks(conn.buffer)
                if pieces:
                    yield b"".join(pieces)
                if ended:
                    while await conn.read_line():
                        pass  # trailers
                    break
                await conn.more()
        else:
            while data := await conn.read_some():
                yield data
            conn.closed = True
        self._done = True
        await self.aclose()

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._done and self._keep_alive and not conn.closed:
            self._transport.release(self._key, conn)
        else:
            # Unread or cut short (a cancelled turn): the server must see the connection go.
            conn.abort()


class LeanTransport(httpx.AsyncBaseTransport):
    def __init__(
        self,
        *,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float | None = 600.0,
        ssl_context: ssl.SSLContext | None = None,
        max_idle_per_origin: int = MAX_IDLE_PER_ORIGIN,
    ) -> None:
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self.ssl_context = ssl_context
        self.max_idle_per_origin = max_idle_per_origin
        self._idle: dict[tuple[str, str, int], collections.deque[_Connection]] = {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol(f"unsupported URL scheme {url.scheme!r}")
        key = (url.scheme, url.host, url.port or (443 if url.scheme == "https" else 80))
        body = await request.aread()
        head = self._head(request, body)
        while True:
            conn = await self._connection(key)
            try:
                conn.write(head + body)
                status, reason, headers = self._parse_head(await conn.read_head())
            except httpx.ReadError:
                conn.abort()
                if conn.reused:
                    # The server closed this pooled connection before it saw the request.
                    continue
                raise
            except BaseException:
                conn.abort()
                raise
            break
        framing, length = self._framing(request, status, headers)
        keep_alive = framing != "close" and not any(
            name.lower() == b"connection" and b"close" in value.lower() for name, value in headers
        )
        stream = _Body(self, key, conn, framing, length, keep_alive)
        return httpx.Response(
            status,
            headers=headers,
            stream=stream,
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": reason, PACE_READS: conn.pace},
        )

    def release(self, key: tuple[str, str, int], conn: _Connection) -> None:
        conn.idle()
        pool = self._idle.setdefault(key, collections.deque())
        if len(pool) >= self.max_idle_per_origin:
            conn.abort()
            return
        pool.append(conn)

    async def aclose(self) -> None:
        for pool in self._idle.values():
            while pool:
                pool.pop().abort()
        self._idle.clear()

    async def _connection(self, key: tuple[str, str, int]) -> _Connection:
        pool = self._idle.get(key)
        while pool:
            conn = pool.pop()
            if not conn.closed and not conn.buffer:
                conn.reused = True
                return conn
            conn.abort()
        loop = asyncio.get_running_loop()
        scheme, host, port = key
        context = None
        if scheme == "https":
            if self.ssl_context is None:
                # Loading the trust store costs milliseconds: once per transport, not per connection.
                self.ssl_context = ssl.create_default_context()
            context = self.ssl_context
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(
                    lambda: _Connection(loop, self.read_timeout_s),
                    host,
                    port,
                    ssl=context,
                    server_hostname=host if context else None,
                ),
                self.connect_timeout_s,
            )
        except TimeoutError:
            raise httpx.ConnectTimeout(f"connecting to {host}:{port} timed out") from None
        except (OSError, ssl.SSLError) as error:
            raise httpx.ConnectError(f"cannot connect to {host}:{port}: {error}") from error
        return conn

    @staticmethod
    def _head(request: httpx.Request, body: bytes) -> bytes:
        url = request.url
        lines = [f"{request.method} {url.raw_path.decode('ascii')} HTTP/1.1".encode()]
        seen_length = False
        for name, value in request.headers.raw:
            lower = name.lower()
            if lower == b"transfer-encoding":
                continue
            if lower == b"content-length":
                seen_length = True
            lines.append(name + b": " + value)
        if not seen_length and (body or request.method in ("POST", "PUT", "PATCH")):
            lines.append(b"Content-Length: " + str(len(body)).encode())
        return _CRLF.join(lines) + b"\r\n\r\n"

    @staticmethod
    def _parse_head(head: bytes) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        status_line, _, rest = head.partition(_CRLF)
        parts = status_line.split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise httpx.RemoteProtocolError(f"bad status line {status_line[:100]!r}")
        headers: list[tuple[bytes, bytes]] = []
        for line in rest.split(_CRLF) if rest else ():
            name, sep, value = line.partition(b":")
            if not sep:
                raise httpx.RemoteProtocolError(f"bad header line {line[:100]!r}")
            headers.append((name.strip(), value.strip()))
        return int(parts[1]), parts[2] if len(parts) > 2 else b"", headers

    @staticmethod
    def _framing(request: httpx.Request, status: int, headers: list[tuple[bytes, bytes]]) -> tuple[str, int]:
        """("length", n), ("chunked", 0) or ("close", 0): how the body ends."""
        if request.method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            return "length", 0
        length: int | None = None
        for name, value in headers:
            lower = name.lower()
            if lower == b"transfer-encoding" and b"chunked" in value.lower():
                return "chunked", 0
            if lower == b"content-length":
                with contextlib.suppress(ValueError):
                    length = int(value)
        if length is not None:
            return "length", length
        return "close", 0
