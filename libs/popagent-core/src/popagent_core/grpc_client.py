"""gRPC client helper: channels that carry this process's credential, and the client error edge."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from opentelemetry.instrumentation.grpc import aio_client_interceptors

from popagent_core.errors import from_grpc_code
from popagent_core.log import request_id_var
from popagent_core.settings import split_addresses
from popagent_core.telemetry import not_health_check, tracing_enabled


class _Credentials:
    """Adds `authorization` and the current request id to every call."""

    def __init__(self, token: str) -> None:
        self.token = token

    def details(self, details: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
        metadata = grpc.aio.Metadata(*(details.metadata or ()))
        if self.token:
            metadata["authorization"] = f"Bearer {self.token}"
        request_id = request_id_var.get()
        if request_id:
            metadata["x-request-id"] = request_id
        return grpc.aio.ClientCallDetails(
            details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
        )


# grpc.aio files each interceptor under the first call kind it implements only, so
# every call kind needs an interceptor object of its own.
class _UnaryUnaryCredentials(_Credentials, grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation, client_call_details, request):  # type: ignore[no-untyped-def]
        return await continuation(self.details(client_call_details), request)


class _UnaryUnaryDeadline(grpc.aio.UnaryUnaryClientInterceptor):
    """Gives every unary call that sets no timeout of its own this one."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s

    async def intercept_unary_unary(self, continuation, client_call_details, request):  # type: ignore[no-untyped-def]
        if client_call_details.timeout is None:
            client_call_details = grpc.aio.ClientCallDetails(
                client_call_details.method,
                self.timeout_s,
                client_call_details.metadata,
                client_call_details.credentials,
                client_call_details.wait_for_ready,
            )
        return await continuation(client_call_details, request)


class _UnaryStreamCredentials(_Credentials, grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(self, continuation, client_call_details, request):  # type: ignore[no-untyped-def]
        return await continuation(self.details(client_call_details), request)


def channel_target(address: str) -> tuple[str, list[tuple[str, Any]]]:
    """The gRPC target and extra channel options for `address`: a list of workers is one target whose
    calls gRPC spreads round robin over the workers that are up."""
    addresses = split_addresses(address)
    if len(addresses) == 1:
        return addresses[0], []
    return "ipv4:" + ",".join(addresses), [("grpc.lb_policy_name", "round_robin")]


@contextlib.asynccontextmanager
async def open_channel(
    address: str, token: str, *, unary_timeout_s: float | None = None
) -> AsyncIterator[grpc.aio.Channel]:
    """A channel to `address` (one address, or a comma-separated list of one service's workers),
    closed on exit.

    With `unary_timeout_s`, a unary call that passes no `timeout` gets that deadline.
    Server-streaming calls get none: a streamed chat turn may run for as long as it works.
    """
    channel = make_channel(address, token, unary_timeout_s=unary_timeout_s)
    try:
        yield channel
    finally:
        await channel.close(grace=None)


def make_channel(address: str, token: str, *, unary_timeout_s: float | None = None) -> grpc.aio.Channel:
    """`open_channel`'s channel, for a holder that closes it itself (`channel.close`)."""
    target, options = channel_target(address)
    # Tracing interceptors (one per call kind) carry the trace context in the call's metadata;
    # none with tracing off (OTEL_SDK_DISABLED), where they would only make spans that record nothing.
    tracing = aio_client_interceptors(filter_=not_health_check) if tracing_enabled() else []
    interceptors: list[grpc.aio.ClientInterceptor] = [
        *tracing,
        _UnaryUnaryCredentials(token),
        _UnaryStreamCredentials(token),
    ]
    if unary_timeout_s is not None:
        interceptors.append(_UnaryUnaryDeadline(unary_timeout_s))
    return grpc.aio.insecure_channel(
        target,
        interceptors=interceptors,
        options=[
            ("grpc.max_receive_message_length", 8 * 1024 * 1024),
            # No bandwidth-delay probing: on loopback it grows a stream's receive window to megabytes,
            # and a server stream the caller reads slowly (a chat turn to a slow SSE client) then
            # piles up ~4.4 MiB in the caller instead of holding its producer back (RELIABILITY row
            # 12, tests/gateway/test_slow_and_vanished_clients.py). The fixed 64 KiB window is no
            # limit between the services' processes, loopback or LAN.
            ("grpc.http2.bdp_probe", 0),
            *options,
        ],
    )


@contextlib.contextmanager
def map_rpc_errors() -> Iterator[None]:
    """Map a failed call's status back onto the popagent error tree (cause kept)."""
    try:
        yield
    except grpc.aio.AioRpcError as exc:
        if exc.code() == grpc.StatusCode.CANCELLED:
            raise
        raise from_grpc_code(exc.code(), exc.details() or exc.code().name) from exc


async def check_health(channel: grpc.aio.Channel, service: str = "", timeout_s: float = 1.0) -> bool:
    """True when the server reports SERVING."""
    stub: Any = health_pb2_grpc.HealthStub(channel)  # the generated stub declares no attributes
    try:
        response = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout_s)
    except grpc.aio.AioRpcError:
        return False
    return response.status == health_pb2.HealthCheckResponse.SERVING
