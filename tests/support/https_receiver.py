"""A real HTTPS hook receiver on 127.0.0.1 with a test CA and scriptable per-path behaviour.

    async with HttpsReceiver(tmp_path) as receiver:
        receiver.script("/ok", answer("pass"))
        receiver.script("/slow", Reply(json_body=..., delay_s=1.0))
        ... POPAGENT_HOOK_CA_FILE=receiver.ca_file, url=receiver.url("/ok")

Behaviours: JSON answers (or a function of the request), delays, a slow drip of the
body, 3xx, oversize bodies, a never-ending chunked body, raw (invalid) bytes, any status
and content type, and closing the connection without an answer. `closed_port()` gives a
port where nothing listens (connection refused). Every request is recorded, and
`verify_signature` checks Standard Webhooks signatures independently of the service.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import os
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trustme

_REASONS = {
    200: "OK",
    204: "No Content",
    301: "Moved Permanently",
    302: "Found",
    307: "Temporary Redirect",
    404: "Not Found",
    500: "Internal Server Error",
}
# A never-ending body stops by itself after this long even if nobody hangs up.
MAX_STREAM_S = 20.0


@dataclass(frozen=True)
class ReceivedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    received_at: float

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass(frozen=True)
class Reply:
    status: int = 200
    json_body: Any = None
    # Sent as-is instead of json_body (invalid JSON, exact sizes, ...).
    raw_body: bytes | None = None
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    # Send the body `drip_bytes` at a time, `drip_interval_s` apart (after the headers).
    drip_interval_s: float = 0.0
    drip_bytes: int = 1
    # Chunked transfer that never ends (until the client hangs up or MAX_STREAM_S).
    endless_chunked: bool = False
    # Close the connection without answering.
    hang_up: bool = False

    def body(self) -> bytes:
        if self.raw_body is not None:
            return self.raw_body
        return json.dumps(self.json_body).encode() if self.json_body is not None else b""


Behaviour = Reply | Callable[[ReceivedRequest], Reply]


def answer(outcome: str = "pass", **fields: Any) -> Reply:
    """A valid schemaVersion 1 answer, e.g. answer("deny", reason="no"), answer("modify", replacement=...)."""
    return Reply(json_body={"schemaVersion": 1, "outcome": outcome, **fields})


def sized_answer(total_bytes: int) -> Reply:
    """A valid pass answer padded with JSON whitespace to exactly `total_bytes`."""
    body = json.dumps({"schemaVersion": 1, "outcome": "pass"}).encode()
    return Reply(raw_body=body + b" " * (total_bytes - len(body)))


def make_secret(size: int = 32) -> str:
    return "whsec_" + base64.b64encode(os.urandom(size)).decode()


def verify_signature(request: ReceivedRequest, secret: str, tolerance_s: int = 300) -> bool:
    """Standard Webhooks verification as a receiver would write it."""
    message_id = request.headers.get("webhook-id", "")
    timestamp = request.headers.get("webhook-timestamp", "")
    signatures = request.headers.get("webhook-signature", "")
    if not message_id or not timestamp.isdigit() or abs(time.time() - int(timestamp)) > tolerance_s:
        return False
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{message_id}.{timestamp}.".encode() + request.body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    for candidate in signatures.split():
        version, _, value = candidate.partition(",")
        if version == "v1" and hmac.compare_digest(value, expected):
            return True
    return False


def closed_port() -> int:
    """A loopback port nobody listens on: connecting is refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class HttpsReceiver:
    def __init__(self, directory: Path, hostnames: tuple[str, ...] = ("127.0.0.1", "localhost", "hooks.test")) -> None:
        self.ca = trustme.CA()
        self.ca_file = directory / "hook-test-ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_file))
        self._context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.ca.issue_cert(*hostnames).configure_cert(self._context)
        self._behaviours: dict[str, Behaviour] = {}
        self.requests: list[ReceivedRequest] = []
        # Endless bodies the client hung up on.
        self.abandoned_streams = 0
        self.connections = 0
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> HttpsReceiver:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self._context)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"https://{host}:{self.port}{path}"

    def script(self, path: str, behaviour: Behaviour) -> None:
        self._behaviours[path] = behaviour

    def requests_for(self, path: str) -> list[ReceivedRequest]:
        return [r for r in self.requests if r.path == path]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)  # type: ignore[arg-type]
        self.connections += 1
        try:
            while await self._one_exchange(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError, OSError):
            pass
        except asyncio.CancelledError:
            # The receiver is stopping; ending quietly keeps asyncio's stream callback from
            # reporting the cancelled connection task as an error.
            pass
        finally:
            self._tasks.discard(task)  # type: ignore[arg-type]
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _one_exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Serve one request; False when the connection should end."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return False
        lines = head.decode("latin-1").split("\r\n")
        method, target, _ = lines[0].split(" ", 2)
        headers = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        request = ReceivedRequest(method, target.split("?", 1)[0], headers, body, time.time())
        self.requests.append(request)

        behaviour = self._behaviours.get(request.path)
        if behaviour is None:
            reply = Reply(status=404, raw_body=b"{}")
        elif callable(behaviour):
            reply = behaviour(request)
        else:
            reply = behaviour
        if reply.delay_s:
            await asyncio.sleep(reply.delay_s)
        if reply.hang_up:
            return False
        await self._send(writer, reply)
        return not reply.endless_chunked

    async def _send(self, writer: asyncio.StreamWriter, reply: Reply) -> None:
        head = [
            f"HTTP/1.1 {reply.status} {_REASONS.get(reply.status, 'Status')}",
            f"Content-Type: {reply.content_type}",
        ]
        head += [f"{name}: {value}" for name, value in reply.headers.items()]
        if reply.endless_chunked:
            writer.write(("\r\n".join([*head, "Transfer-Encoding: chunked"]) + "\r\n\r\n").encode())
            chunk = b" " * 4096
            deadline = time.monotonic() + MAX_STREAM_S
            try:
                while time.monotonic() < deadline:
                    writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    await writer.drain()
                    await asyncio.sleep(0.001)
            except (ConnectionError, OSError):
                self.abandoned_streams += 1
            return
        body = reply.body()
        writer.write(("\r\n".join([*head, f"Content-Length: {len(body)}"]) + "\r\n\r\n").encode())
        if reply.drip_interval_s:
            for start in range(0, len(body), reply.drip_bytes):
                await writer.drain()
                await asyncio.sleep(reply.drip_interval_s)
                writer.write(body[start : start + reply.drip_bytes])
        else:
            writer.write(body)
        await writer.drain()
