"""Outbound HTTPS to hook handlers: pooled, signed, address-checked, capped, one deadline.

- The hostname allow-list is checked when the configuration loads (exact hostnames).
- Each new connection goes through the kernel's address guard (popagent_core.address_guard,
  shared with webFetch): loopback, private, link-local, CGNAT, metadata and other
  non-global addresses are refused at connect time (unless the operator allows private
  ones), and the connection goes to the very address that was checked.
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
import logging
import ssl
from pathlib import Path

import certifi
import httpcore

from popagent_core.address_guard import BlockedAddress, GuardedBackend, Resolver, guarded_pool
from popagent_hooks_client.events import FailureClass

logger = logging.getLogger(__name__)

MAX_RESPONSE_BYTES = 64 * 1024
USER_AGENT = b"popagent-hooks/1"


class HookFailure(Exception):
    """A handler call that produced no valid answer; `failure_class` picks the audit class."""

    def __init__(self, failure_class: FailureClass, message: str) -> None:
        super().__init__(message)
        self.failure_class = failure_class


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
        self._pool = guarded_pool(self.backend, tls_context(ca_file), max_connections=max_connections, max_keepalive=64)

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
