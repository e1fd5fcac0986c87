"""Outbound HTTPS to hook handlers: pooled, signed, address-checked, capped, one deadline.

- The hostname allow-list is checked when the configuration loads (exact hostnames).
- Each new connection resolves the hostname itself, refuses loopback, private,
  link-local, CGNAT, metadata and other non-global addresses (unless the operator
  allows private ones), and connects to the very address it checked, so a DNS answer
  that changes between check and use (rebinding) cannot slip through.
- Connections are kept alive and reused, so a dispatch pays no TLS handshake once warm.
- Redirects are never followed; the body is read with a byte cap that closes the stream
  as soon as it is exceeded; one deadline covers connect, send and the whole read.
- Requests carry only the fixed headers built here: no cookies, proxies from the
  environment, credentials or caller-supplied headers (httpcore has none of those).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import ipaddress
import logging
import socket
import ssl
import typing
from collections.abc import Awaitable, Callable
from pathlib import Path

import certifi
import httpcore

from popagent_hooks_client.events import FailureClass

logger = logging.getLogger(__name__)

MAX_RESPONSE_BYTES = 64 * 1024
USER_AGENT = b"popagent-hooks/1"

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[list[str]]]


class HookFailure(Exception):
    """A handler call that produced no valid answer; `failure_class` picks the audit class."""

    def __init__(self, failure_class: FailureClass, message: str) -> None:
        super().__init__(message)
        self.failure_class = failure_class


class BlockedAddress(httpcore.ConnectError):
    """The hostname resolved only to addresses hooks may not connect to."""


# Cloud metadata endpoints stay refused even when private addresses are allowed: no
# hook receiver lives there, and reaching one hands out the host's credentials.
_METADATA = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "169.254.170.2", "169.254.169.123", "100.100.100.200", "fd00:ec2::254")
)
_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
# Categories POPAGENT_HOOK_ALLOW_PRIVATE_ADDRESSES=true opens; the others never open.
PRIVATE_CATEGORIES = frozenset({"loopback", "private", "link-local", "cgnat"})


def address_category(address: IPAddress) -> str | None:
    """Why hooks may not connect to `address` ("loopback", "metadata", ...), or None if it is global."""
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


async def system_resolver(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """A network backend that checks the address it is about to connect to."""

    def __init__(self, *, allow_private: bool, resolver: Resolver | None = None) -> None:
        self.allow_private = allow_private
        self.resolver = resolver or system_resolver
        # Typed as the interface: httpcore's stubs see a placeholder class when anyio is optional.
        self._inner = typing.cast(httpcore.AsyncNetworkBackend, httpcore.AnyIOBackend())

    async def resolve_allowed(self, host: str, port: int) -> list[str]:
        """Addresses of `host` hooks may connect to; BlockedAddress when there are none."""
        try:
            candidates = [str(ipaddress.ip_address(host.strip("[]")))]
        except ValueError:
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
        raise httpcore.ConnectError("hooks never connect to Unix sockets")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def sign(secret: bytes, message_id: str, timestamp: int, body: bytes) -> str:
    """Standard Webhooks `webhook-signature` value: `v1,<base64 HMAC-SHA256 of "id.timestamp.body">`."""
    signed = f"{message_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(secret, signed, hashlib.sha256).digest()).decode()


def tls_context(ca_file: Path | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=certifi.where())
    if ca_file is not None:
        context.load_verify_locations(cafile=str(ca_file))
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def _media_type(value: bytes) -> bytes:
    return value.split(b";", 1)[0].strip().lower()


class HookTransport:
    """One keep-alive pool shared by every handler of the process."""

    def __init__(
        self,
        *,
        allow_private: bool,
        ca_file: Path | None = None,
        resolver: Resolver | None = None,
        max_connections: int = 256,
    ) -> None:
        self.backend = GuardedBackend(allow_private=allow_private, resolver=resolver)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=tls_context(ca_file),
            max_connections=max_connections,
            max_keepalive_connections=64,
            keepalive_expiry=15.0,
            http1=True,
            http2=False,
            retries=0,
            network_backend=self.backend,
        )

    async def aclose(self) -> None:
        await self._pool.aclose()

    async def post(self, url: str, body: bytes, headers: list[tuple[bytes, bytes]], timeout_s: float) -> bytes:
        """POST `body` and return the 2xx JSON response body, or raise HookFailure."""
        request_headers = [
            (b"Content-Type", b"application/json"),
            (b"Accept", b"application/json"),
            # Compressed answers could expand past the cap before it is counted.
            (b"Accept-Encoding", b"identity"),
            (b"User-Agent", USER_AGENT),
            *headers,
        ]
        limits = {"connect": timeout_s, "read": timeout_s, "write": timeout_s, "pool": timeout_s}
        try:
            async with asyncio.timeout(timeout_s):
                async with self._pool.stream(
                    "POST", url, headers=request_headers, content=body, extensions={"timeout": limits}
                ) as response:
                    return await self._read(response)
        except HookFailure:
            raise
        except (TimeoutError, httpcore.TimeoutException):
            raise HookFailure(FailureClass.TIMEOUT, f"no complete answer within {round(timeout_s * 1000)} ms") from None
        except BlockedAddress as exc:
            raise HookFailure(FailureClass.TRANSPORT, f"address refused: {exc}") from None
        except (httpcore.ConnectError, httpcore.NetworkError, httpcore.ProtocolError, ssl.SSLError, OSError) as exc:
            raise HookFailure(FailureClass.TRANSPORT, f"{type(exc).__name__}: {exc}"[:500]) from None
        except Exception as exc:
            # Whatever else the HTTP stack raises must still take the handler's failure mode,
            # never bypass it; the traceback is kept for whoever reads the log.
            logger.warning("unexpected hook transport error", exc_info=exc)
            raise HookFailure(FailureClass.TRANSPORT, f"{type(exc).__name__}: {exc}"[:500]) from None

    @staticmethod
    async def _read(response: httpcore.Response) -> bytes:
        status = response.status
        if 300 <= status < 400:
            raise HookFailure(FailureClass.TRANSPORT, f"HTTP {status} redirect not followed")
        if not 200 <= status < 300:
            raise HookFailure(FailureClass.TRANSPORT, f"HTTP {status}")
        headers = {name.lower(): value for name, value in response.headers}
        if _media_type(headers.get(b"content-type", b"")) != b"application/json":
            raise HookFailure(FailureClass.MALFORMED_RESPONSE, "content-type is not application/json")
        if headers.get(b"content-encoding", b"identity").strip().lower() != b"identity":
            raise HookFailure(FailureClass.MALFORMED_RESPONSE, "compressed responses are not accepted")
        declared = headers.get(b"content-length")
        if declared is not None and declared.strip().isdigit() and int(declared) > MAX_RESPONSE_BYTES:
            raise HookFailure(FailureClass.MALFORMED_RESPONSE, f"response exceeds {MAX_RESPONSE_BYTES} bytes")
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_stream():
            size += len(chunk)
            if size > MAX_RESPONSE_BYTES:
                # Leaving the stream context closes the connection mid-body.
                raise HookFailure(FailureClass.MALFORMED_RESPONSE, f"response exceeds {MAX_RESPONSE_BYTES} bytes")
            chunks.append(chunk)
        return b"".join(chunks)
