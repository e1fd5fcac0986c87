"""A DNS-rebinding attack on the connect-time address guard (RELIABILITY row 18), over real sockets.

- `RebindingDns`: a real DNS server on UDP 127.0.0.1 whose A answer for any name flips on every
  query between a public address and a refused one (loopback, the unspecified address, this
  machine's own non-global addresses), always with TTL 0, as an attacker's name server answers;
  `resolve` is the guard's resolver, a plain DNS client asking it over UDP (no cache).
- `PrivateListener`: a TCP listener on 0.0.0.0, so every refused address the server hands out
  physically reaches it; it counts the connections it accepts, which must stay 0.
- `RoutePublicToLocal`: where the guard's allowed connections go. The public address stands for
  a public site and is routed to a local server; every other address is connected to as it is,
  so an address the guard wrongly let through lands on the private listener.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import itertools
import os
import socket
import struct
import typing
from typing import Self

import httpcore
import psutil

from popagent_core.address_guard import address_allowed
from popagent_dev.embedded import free_port

# A global address (example.com's); never connected to, it is routed to a local server.
PUBLIC_ADDRESS = "93.184.215.14"
_A, _IN = 1, 1


def refused_local_addresses() -> list[str]:
    """Addresses the guard refuses (without allow-private) that reach a listener on 0.0.0.0 here."""
    own = [
        address.address
        for addresses in psutil.net_if_addrs().values()
        for address in addresses
        if address.family == socket.AF_INET
    ]
    candidates = ["127.0.0.1", "127.45.6.7", "0.0.0.0", *own]
    return [a for a in dict.fromkeys(candidates) if not address_allowed(ipaddress.ip_address(a), False)]


def _name(labels: str) -> bytes:
    return b"".join(bytes([len(part)]) + part.encode() for part in labels.rstrip(".").split(".")) + b"\x00"


def _skip_name(packet: bytes, offset: int) -> int:
    while True:
        length = packet[offset]
        if length & 0xC0 == 0xC0:  # a compression pointer ends the name
            return offset + 2
        if length == 0:
            return offset + 1
        offset += 1 + length


class _Answering(asyncio.DatagramProtocol):
    def __init__(self, dns: RebindingDns) -> None:
        self.dns = dns
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = typing.cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        assert self.transport is not None
        query_id = data[:2]
        question_end = _skip_name(data, 12) + 4
        question = data[12:question_end]
        (qtype,) = struct.unpack(">H", data[question_end - 4 : question_end - 2])
        answers = b""
        count = 0
        if qtype == _A:
            address = self.dns.next_answer()
            # Name as a pointer to the question's, type A, class IN, TTL 0, 4 bytes of address.
            answers = struct.pack(">HHHIH", 0xC00C, _A, _IN, 0, 4) + socket.inet_aton(address)
            count = 1
        header = query_id + struct.pack(">HHHHH", 0x8180, 1, count, 0, 0)
        self.transport.sendto(header + question + answers, addr)


class RebindingDns:
    """An attacker's name server: the answer alternates public, refused, public, refused, ..."""

    def __init__(self) -> None:
        self.queries = 0
        self.answers: list[str] = []
        self.ttls: list[int] = []
        self._refused = itertools.cycle(refused_local_addresses())
        self._transport: asyncio.DatagramTransport | None = None
        self.port = 0

    def next_answer(self) -> str:
        self.queries += 1
        address = PUBLIC_ADDRESS if self.queries % 2 == 1 else next(self._refused)
        self.answers.append(address)
        return address

    @property
    def flips(self) -> int:
        """Times the answer changed between public and refused."""
        return sum(1 for a, b in itertools.pairwise(self.answers) if (a == PUBLIC_ADDRESS) != (b == PUBLIC_ADDRESS))

    async def __aenter__(self) -> Self:
        transport, _ = await asyncio.get_running_loop().create_datagram_endpoint(
            lambda: _Answering(self), local_addr=("127.0.0.1", 0)
        )
        self._transport = typing.cast(asyncio.DatagramTransport, transport)
        self.port = self._transport.get_extra_info("sockname")[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._transport is not None:
            self._transport.close()

    async def resolve(self, host: str, port: int) -> list[str]:
        """The A records of `host` as this server answers them now: one UDP query, nothing cached."""
        loop = asyncio.get_running_loop()
        reply: asyncio.Future[bytes] = loop.create_future()

        class Client(asyncio.DatagramProtocol):
            def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
                if not reply.done():
                    reply.set_result(data)

        query_id = os.urandom(2)
        query = query_id + struct.pack(">HHHHH", 0x0100, 1, 0, 0, 0) + _name(host) + struct.pack(">HH", _A, _IN)
        transport, _ = await loop.create_datagram_endpoint(Client, remote_addr=("127.0.0.1", self.port))
        try:
            transport.sendto(query)
            packet = await asyncio.wait_for(reply, 2)
        finally:
            transport.close()
        if packet[:2] != query_id:
            raise OSError("DNS answer to another query")
        (answer_count,) = struct.unpack(">H", packet[6:8])
        offset = _skip_name(packet, 12) + 4
        addresses = []
        for _ in range(answer_count):
            offset = _skip_name(packet, offset)
            rtype, _rclass, ttl, length = struct.unpack(">HHIH", packet[offset : offset + 10])
            offset += 10
            if rtype == _A:
                addresses.append(socket.inet_ntoa(packet[offset : offset + length]))
                self.ttls.append(ttl)
            offset += length
        if not addresses:
            raise OSError(f"no A record for {host}")
        return addresses


class PrivateListener:
    """A TCP listener on every local address that counts the connections it accepts."""

    def __init__(self) -> None:
        self.port = free_port()
        self.connections = 0
        self._server: asyncio.Server | None = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._accept, "0.0.0.0", self.port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


class RoutePublicToLocal(httpcore.AsyncNetworkBackend):
    """The guard's inner backend: PUBLIC_ADDRESS goes to `public_port` on 127.0.0.1, every other
    address to itself (so a refused address let through reaches the private listener)."""

    def __init__(self, public_port: int) -> None:
        self.public_port = public_port
        self.connected: list[str] = []
        self._os = typing.cast(httpcore.AsyncNetworkBackend, httpcore.AnyIOBackend())

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore backend interface
        local_address: str | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        self.connected.append(host)
        if host == PUBLIC_ADDRESS:
            return await self._os.connect_tcp("127.0.0.1", self.public_port, timeout, local_address, socket_options)
        return await self._os.connect_tcp(host, port, timeout, local_address, socket_options)

    async def sleep(self, seconds: float) -> None:
        await self._os.sleep(seconds)
