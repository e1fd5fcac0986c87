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

from popagent_agent_runner.turn.model_transport import LeanTransport
from support.https_receiver import HttpsReceiver, Reply, closed_port
from support.model_gateway import ModelGateway, Turn

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

    async def cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel")

    async with raw_server(cut) as (url, _):
        with pytest.raises(httpx.ReadError):
            await client.get(f"{url}/cut")

    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"SMTP ready\r\n\r\n")

    async with raw_server(garbage) as (url, _):
        with pytest.raises(httpx.RemoteProtocolError):
            await client.get(f"{url}/x")


async def test_closing_a_stream_early_closes_the_connection(client: httpx.AsyncClient) -> None:
    async with ModelGateway([Turn.say("x" * 200, chunk_size=2, chunk_delay_s=0.01)]) as gw:
        async with client.stream("POST", f"{gw.url}/chat/completions", json={"model": "m", "messages": []}) as r:
            async for _ in r.aiter_bytes():
                break
        for _ in range(100):
            if gw.disconnected:
                break
            await asyncio.sleep(0.02)
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
