"""The model client's HTTP/1.1 transport against real sockets: framing, keep-alive, failures, cancellation."""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import httpx
import pytest

from popagent_agent_runner.llm.transport import LeanTransport
from popagent_agent_runner.llm.wire import PACE_READS
from support.https_receiver import HttpsReceiver, Reply, closed_port
from support.model_gateway import ModelGateway, Turn
from support.waiting import eventually

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@contextlib.asynccontextmanager
async def raw_server(handler: Handler) -> AsyncIterator[tuple[str, list[int]]]:
    """A TCP server answering with hand-written HTTP; yields its URL and a count of connections."""
    connections: list[int] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        try:
            await handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", connections
    finally:
        server.close()


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        (int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")), 0
    )
    return head + await reader.readexactly(length)


def content_of(body: bytes) -> str:
    """The text of a streamed chat completion."""
    text = ""
    for line in body.split(b"\n"):
        if line.startswith(b"data: {"):
            for choice in json.loads(line[6:])["choices"]:
                text += choice["delta"].get("content") or ""
    return text


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=LeanTransport(read_timeout_s=2.0), timeout=None) as http:
        yield http


async def test_streams_a_chat_completion_and_reuses_the_connection(client: httpx.AsyncClient) -> None:
    async with ModelGateway([Turn.say("hello world", chunk_size=2)], loop=True) as gw:
        bodies = []
        for _ in range(3):
            async with client.stream("POST", f"{gw.url}/chat/completions", json={"model": "m", "messages": []}) as r:
                assert r.status_code == 200
                assert r.headers["content-type"] == "text/event-stream"
                bodies.append(b"".join([chunk async for chunk in r.aiter_bytes()]))
        models = await client.get(f"{gw.url}/models")
    assert [content_of(body) for body in bodies] == ["hello world"] * 3
    assert all(body.endswith(b"data: [DONE]\n\n") for body in bodies)
    assert models.json()["data"][0]["id"] == "fake/fake-chat"
    assert [request["model"] for request in gw.requests] == ["m", "m", "m"]


async def test_content_length_and_connection_close_bodies(client: httpx.AsyncClient) -> None:
    answers = iter(
        [
            b"HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nRetry-After: 3\r\n"
            b'Content-Length: 16\r\n\r\n{"error":"slow"}',
            # No length, no chunking: the body runs until the server closes the connection.
            b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end",
            b"HTTP/1.1 204 No Content\r\n\r\n",
        ]
    )

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await read_request(reader)
            answer = next(answers)
            writer.write(answer)
            await writer.drain()
            if b"Connection: close" in answer:
                return

    async with raw_server(handler) as (url, connections):
        limited = await client.post(f"{url}/v1/chat/completions", content=b"{}")
        closing = await client.get(f"{url}/v1/x")
        empty = await client.get(f"{url}/v1/y")
    assert (limited.status_code, limited.headers["retry-after"], limited.json()) == (429, "3", {"error": "slow"})
    assert closing.content == b"until the end"
    assert (empty.status_code, empty.content) == (204, b"")
    # The first two answers shared a connection; the one that ended it was not reused.
    assert len(connections) == 2


async def test_a_pooled_connection_the_server_closed_is_replaced_transparently(client: httpx.AsyncClient) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        # Keep-alive timeout: the server closes the idle connection after one answer.

    async with raw_server(handler) as (url, connections):
        first = await client.get(f"{url}/a")
        await asyncio.sleep(0.05)
        second = await client.get(f"{url}/b")
    assert (first.content, second.content) == (b"ok", b"ok")
    assert len(connections) == 2


async def test_failures_are_httpx_transport_errors(client: httpx.AsyncClient) -> None:
    with pytest.raises(httpx.ConnectError):
        await client.get(f"http://127.0.0.1:{closed_port()}/v1/models")

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
        await writer.drain()
        await asyncio.sleep(5)

    async with raw_server(silent) as (url, _):
        async with client.stream("GET", f"{url}/stream") as response:
            chunks: list[bytes] = []
            with pytest.raises(httpx.ReadTimeout):
                async for chunk in response.aiter_raw():
                    chunks.append(chunk)
        assert chunks == [b"hello"]

    # A body cut short, then an answer that is not HTTP at all.
    for answer, error in (
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", httpx.ReadError),
        (b"SMTP ready\r\n\r\n", httpx.RemoteProtocolError),
    ):

        async def answering(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, answer: bytes = answer) -> None:
            await read_request(reader)
            writer.write(answer)

        async with raw_server(answering) as (url, _):
            with pytest.raises(error):
                await client.get(f"{url}/x")


async def test_chunked_bodies_split_anywhere_arrive_whole_and_buffered_chunks_together(
    client: httpx.AsyncClient,
) -> None:
    chunks = [f"data: {n:03d}\n\n".encode() for n in range(12)]
    wire = b"".join(f"{len(c):x};ext=1\r\n".encode() + c + b"\r\n" for c in chunks) + b"0\r\nTrailer: x\r\n\r\n"
    release = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        # Cut mid size line, mid payload and mid CRLF, and send half of the body before the reader looks.
        half = len(wire) // 2
        for piece in (wire[:7], wire[7:19], wire[19:half]):
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(0.02)
        await release.wait()
        writer.write(wire[half:])
        await writer.drain()
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()

    async with raw_server(handler) as (url, connections):
        async with client.stream("GET", f"{url}/stream") as response:
            pieces: list[bytes] = []
            async for piece in response.aiter_raw():
                pieces.append(piece)
                release.set()
        again = await client.get(f"{url}/again")
    assert b"".join(pieces) == b"".join(chunks)
    # Chunks that waited together were handed on together, and a piece is always whole chunks.
    assert len(pieces) < len(chunks)
    assert all(piece.endswith(b"\n\n") for piece in pieces)
    # The trailer was read and the connection went back to the pool.
    assert again.content == b"ok" and len(connections) == 1


async def test_a_paced_body_is_read_at_most_once_per_interval(client: httpx.AsyncClient) -> None:
    # 60 chunks 5 ms apart: unpaced, each arrives on its own; paced at 50 ms, a read takes ~10 at once.
    script = [Turn.say("x" * 120, chunk_size=2, chunk_delay_s=0.005)] * 2
    async with ModelGateway(script) as gw:
        reads: dict[str, list[bytes]] = {}
        for label, interval in (("unpaced", 0.0), ("paced", 0.05)):
            async with client.stream("POST", f"{gw.url}/chat/completions", json={"model": "m", "messages": []}) as r:
                reads[label] = []
                async for raw in r.aiter_raw():
                    if not reads[label] and interval:
                        r.extensions[PACE_READS](interval)
                    reads[label].append(raw)
    assert content_of(b"".join(reads["paced"])) == content_of(b"".join(reads["unpaced"])) == "x" * 120
    assert len(reads["unpaced"]) > 40
    assert len(reads["paced"]) <= 12, f"{len(reads['paced'])} reads of a paced body"


async def test_pacing_ends_when_the_connection_returns_to_the_pool(client: httpx.AsyncClient) -> None:
    script = [Turn.say("y" * 40, chunk_size=2, chunk_delay_s=0.005)] * 2
    async with ModelGateway(script) as gw:
        reads: list[list[bytes]] = []
        connections: list[object] = []
        for pace in (True, False):
            async with client.stream("POST", f"{gw.url}/chat/completions", json={"model": "m", "messages": []}) as r:
                reads.append([])
                connections.append(r.extensions[PACE_READS].__self__)
                async for raw in r.aiter_raw():
                    if pace and len(reads[-1]) == 0:
                        r.extensions[PACE_READS](0.05)
                    reads[-1].append(raw)
    assert connections[0] is connections[1], "both answers came over one pooled connection"
    assert len(reads[0]) <= 5
    assert len(reads[1]) > 15, "the pooled connection was still paced"


async def test_the_end_of_a_paced_body_is_handed_on_at_once() -> None:
    # Paced at a minute from the first read on: what follows arrives within the interval, and the
    # body's end must not wait for it (the turn's last text and its finish wait for the end).
    interval = 60.0
    script = [Turn.say("z" * 120, chunk_size=2, chunk_delay_s=0.002)]
    pieces: list[bytes] = []
    async with (
        httpx.AsyncClient(transport=LeanTransport(read_timeout_s=None), timeout=None) as http,
        ModelGateway(script) as gw,
        asyncio.timeout(interval / 2),
        http.stream("POST", f"{gw.url}/chat/completions", json={"model": "m", "messages": []}) as r,
    ):
        async for raw in r.aiter_raw():
            if not pieces:
                r.extensions[PACE_READS](interval)
            pieces.append(raw)
    assert content_of(b"".join(pieces)) == "z" * 120
    assert len(pieces) <= 3, f"{len(pieces)} reads: the body was not paced"


async def test_bytes_holding_the_wake_marker_are_handed_on_at_once() -> None:
    # A server that sends `[DONE]` and keeps the body open: the marker is the stream's end all the same.
    def chunk(data: bytes) -> bytes:
        return f"{len(data):x}\r\n".encode() + data + b"\r\n"

    release = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk(b"data: {}\n\n"))
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(chunk(b"data: [DONE]\n\n"))
        await writer.drain()
        await release.wait()
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    pieces: list[bytes] = []
    async with (
        raw_server(handler) as (url, _),
        httpx.AsyncClient(transport=LeanTransport(read_timeout_s=None), timeout=None) as http,
        asyncio.timeout(30),
        http.stream("GET", f"{url}/stream") as r,
    ):
        async for raw in r.aiter_raw():
            if not pieces:
                r.extensions[PACE_READS](60.0, b"[DONE]")
            pieces.append(raw)
            if b"[DONE]" in raw:
                release.set()
    assert b"".join(pieces) == b"data: {}\n\ndata: [DONE]\n\n"


async def test_a_pace_longer_than_the_read_timeout_is_not_a_timeout() -> None:
    transport = LeanTransport(read_timeout_s=0.2)
    script = [Turn.say("w" * 40, chunk_size=2, chunk_delay_s=0.01)]
    body = b""
    async with (
        httpx.AsyncClient(transport=transport, timeout=None) as http,
        ModelGateway(script) as gw,
        http.stream("POST", f"{gw.url}/chat/completions", json={"model": "m", "messages": []}) as r,
    ):
        async for raw in r.aiter_raw():
            if not body:
                r.extensions[PACE_READS](5.0)
            body += raw
    assert content_of(body) == "w" * 40


async def test_closing_a_stream_early_closes_the_connection(client: httpx.AsyncClient) -> None:
    async with ModelGateway([Turn.say("x" * 200, chunk_size=2, chunk_delay_s=0.01)]) as gw:
        async with client.stream("POST", f"{gw.url}/chat/completions", json={"model": "m", "messages": []}) as r:
            async for _ in r.aiter_bytes():
                break
        await eventually(lambda: gw.disconnected, within=2, interval=0.02, what="the server to notice")
        assert gw.disconnected == 1


async def test_https_with_a_trusted_ca(tmp_path: Path) -> None:
    async with HttpsReceiver(tmp_path) as receiver:
        receiver.script("/v1/models", Reply(json_body={"object": "list", "data": []}))
        context = ssl.create_default_context(cafile=str(receiver.ca_file))
        async with httpx.AsyncClient(transport=LeanTransport(ssl_context=context), timeout=None) as http:
            first = await http.get(receiver.url("/v1/models"))
            second = await http.get(receiver.url("/v1/models"))
        async with httpx.AsyncClient(transport=LeanTransport(), timeout=None) as untrusting:
            with pytest.raises(httpx.ConnectError):
                await untrusting.get(receiver.url("/v1/models"))
    assert first.json() == second.json() == {"object": "list", "data": []}
    # One connection, kept alive for both requests (the refused handshake never reached the server).
    assert receiver.connections == 1
