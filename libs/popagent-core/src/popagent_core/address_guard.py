"""The connect-time address guard every outbound HTTP client to a caller-named URL uses.

Hook handlers (the hooks service) and `webFetch` (agent-runner) connect to URLs someone
else chose, so both go through this one httpcore network backend:
- each new connection resolves the hostname itself, refuses loopback, private,
  link-local, CGNAT, metadata and other non-global addresses (unless the operator
  allows private ones), and connects to the very address it checked, so a DNS answer
  that changes between check and use (rebinding) cannot slip through;
- IP literals in any spelling the URL parser lets through are judged as the address they
  are: legacy IPv4 forms (decimal, octal, hex, short) as inet_aton reads them, IPv6
  forms that carry an IPv4 address (IPv4-mapped, 6to4, NAT64, Teredo) by that address;
- Unix sockets are never connected to.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
import typing
from collections.abc import Awaitable, Callable

import httpcore

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[list[str]]]


class BlockedAddress(httpcore.ConnectError):
    """The hostname resolved only to addresses the guard refuses."""


# Cloud metadata endpoints stay refused even when private addresses are allowed: no
# legitimate target lives there, and reaching one hands out the host's credentials.
_METADATA = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "169.254.170.2", "169.254.169.123", "100.100.100.200", "fd00:ec2::254")
)
_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
# Categories an allow-private setting (e.g. POPAGENT_HOOK_ALLOW_PRIVATE_ADDRESSES=true) opens; the others never open.
PRIVATE_CATEGORIES = frozenset({"loopback", "private", "link-local", "cgnat"})


def address_category(address: IPAddress) -> str | None:
    """Why the guard refuses `address` ("loopback", "metadata", ...), or None if it is global."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is None and address in _NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is None and address.teredo is not None:
            embedded = address.teredo[1]
        if embedded is not None:
            return address_category(embedded) or ("reserved" if address.teredo else None)
    if address in _METADATA:
        return "metadata"
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local"
    if address in _CGNAT:
        return "cgnat"
    if address.is_multicast or address.is_unspecified or address.is_reserved:
        return "reserved"
    if address.is_private:
        return "private"
    if not address.is_global:
        return "reserved"
    return None


def address_allowed(address: IPAddress, allow_private: bool) -> bool:
    category = address_category(address)
    return category is None or (allow_private and category in PRIVATE_CATEGORIES)


def ip_literal(host: str) -> IPAddress | None:
    """The address `host` spells, or None for a name to resolve.

    Besides the standard forms this reads IPv4 the way inet_aton (and so getaddrinfo and
    every browser) does: decimal `2130706433`, octal `0177.0.0.1`, hex `0x7f.1`, short
    `127.1`. The verdict then never depends on how a resolver would have read them.
    """
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        pass
    if not host or not all(c.isalnum() or c == "." for c in host) or not host[0].isdigit():
        return None
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except OSError:
        return None


async def system_resolver(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """A network backend that checks the address it is about to connect to."""

    def __init__(
        self,
        *,
        allow_private: bool,
        resolver: Resolver | None = None,
        inner: httpcore.AsyncNetworkBackend | None = None,
    ) -> None:
        self.allow_private = allow_private
        self.resolver = resolver or system_resolver
        # Where an allowed connection physically goes: the OS by default; a test may route a
        # checked public address to a local server to see what the guard does after it.
        # Typed as the interface: httpcore's stubs see a placeholder class when anyio is optional.
        self._inner = inner or typing.cast(httpcore.AsyncNetworkBackend, httpcore.AnyIOBackend())

    async def resolve_allowed(self, host: str, port: int) -> list[str]:
        """Addresses of `host` the guard lets a connection go to; BlockedAddress when there are none."""
        literal = ip_literal(host)
        if literal is not None:
            candidates = [str(literal)]
        else:
            try:
                candidates = await self.resolver(host, port)
            except OSError as exc:
                raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from exc
        allowed, refused = [], []
        for candidate in candidates:
            address = ipaddress.ip_address(candidate.split("%", 1)[0])
            if address_allowed(address, self.allow_private):
                allowed.append(str(address))
            else:
                refused.append(f"{address} ({address_category(address)})")
        if not allowed:
            raise BlockedAddress(f"{host} resolves only to refused addresses: {', '.join(refused) or 'none'}")
        return allowed

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore backend interface
        local_address: str | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        last_error: Exception | None = None
        for address in await self.resolve_allowed(host, port):
            try:
                # The TLS layer still verifies the certificate against the hostname.
                return await self._inner.connect_tcp(address, port, timeout, local_address, socket_options)
            except httpcore.ConnectError as exc:
                last_error = exc
        raise last_error or httpcore.ConnectError(f"cannot connect to {host}")

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore backend interface
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("guarded clients never connect to Unix sockets")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def guarded_pool(
    backend: GuardedBackend, ssl_context: ssl.SSLContext, *, max_connections: int, max_keepalive: int
) -> httpcore.AsyncConnectionPool:
    """An HTTP/1.1 pool whose every connection goes through `backend`'s address check. No
    retries: a refused or failed connection is the caller's answer, never tried elsewhere."""
    return httpcore.AsyncConnectionPool(
        ssl_context=ssl_context,
        max_connections=max_connections,
        max_keepalive_connections=max_keepalive,
        keepalive_expiry=15.0,
        http1=True,
        http2=False,
        retries=0,
        network_backend=backend,
    )
