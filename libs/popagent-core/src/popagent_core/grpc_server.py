"""gRPC server helper: health service, request ids, caller authentication, error mapping.

Servicers stay thin: they raise `PopagentError`s and the interceptor turns each into
`context.abort(code, message)`; anything else becomes INTERNAL with the traceback
logged (never sent). `asyncio.CancelledError` passes through untouched.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

# The asyncio servicer that grpc_health re-exports as `health.aio.HealthServicer`; imported
# from its module so type checkers see the class.
from grpc_health.v1._async import HealthServicer
from opentelemetry.instrumentation.grpc import aio_server_interceptor

from popagent_core.auth import CallerRegistry, caller_var
from popagent_core.errors import PopagentError, StorageError
from popagent_core.log import request_id_var
from popagent_core.telemetry import not_health_check, tracing_enabled

logger = logging.getLogger(__name__)


_PUBLIC_PREFIXES = ("/grpc.health.v1.Health/",)


def _metadata(context: grpc.aio.ServicerContext) -> dict[str, str]:
    return {k: v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}


async def _enter(method: str, context: grpc.aio.ServicerContext, callers: CallerRegistry | None) -> None:
    metadata = _metadata(context)
    request_id_var.set(metadata.get("x-request-id") or uuid.uuid4().hex)
    if callers is None or method.startswith(_PUBLIC_PREFIXES):
        return
    token = metadata.get("authorization", "").removeprefix("Bearer ")
    try:
        caller_var.set(callers.authenticate(token))
    except PopagentError as exc:
        await context.abort(exc.grpc_code, str(exc))


# Bounds a driver error's message in a log line.
MAX_LOGGED_REASON = 500


async def _abort_for(method: str, exc: Exception, context: grpc.aio.ServicerContext) -> None:
    if isinstance(exc, NotImplementedError):
        # What the generated servicer base raises for an RPC the service does not implement.
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{method} is not implemented")
    if isinstance(exc, PopagentError):
        if exc.grpc_code == grpc.StatusCode.INTERNAL:
            logger.error("rpc failed", extra={"method": method, "error": type(exc).__name__}, exc_info=exc)
        elif isinstance(exc, StorageError):
            # The caller gets the driver error's type only; its message (the server's reason, or the
            # connection's) is what tells why, so it is logged here, once per failed call.
            cause = exc.__cause__
            reason = f"{type(cause).__name__}: {cause}"[:MAX_LOGGED_REASON] if cause else str(exc)
            logger.warning("rpc storage error", extra={"method": method, "reason": reason})
        await context.abort(exc.grpc_code, str(exc))
    logger.error("rpc failed unexpectedly", extra={"method": method}, exc_info=exc)
    await context.abort(grpc.StatusCode.INTERNAL, "internal error")


def _refused(method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """A client- or bidi-streaming handler, replaced by one that answers UNIMPLEMENTED at once.

    The interceptor authenticates the caller and maps errors for unary requests only; passing
    any other kind through would run it with no caller check. Until the kernel wraps a kind,
    an RPC of it is refused whoever calls, before its handler sees a message.
    """
    kind = "bidi-streaming" if handler.stream_stream else "client-streaming"
    detail = f"{method} is {kind}, which popagent's gRPC kernel does not serve (unary requests only)"

    async def refuse(request_iterator: Any, context: grpc.aio.ServicerContext) -> None:
        logger.error("rpc kind refused", extra={"method": method, "kind": kind})
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, detail)

    async def refuse_stream(request_iterator: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        # A response stream is an async generator to whoever wraps it (the tracing interceptor iterates it).
        await refuse(request_iterator, context)
        return
        yield

    if handler.stream_stream:
        return grpc.stream_stream_rpc_method_handler(
            refuse_stream, handler.request_deserializer, handler.response_serializer
        )
    return grpc.stream_unary_rpc_method_handler(refuse, handler.request_deserializer, handler.response_serializer)


class KernelInterceptor(grpc.aio.ServerInterceptor):
    """Request id, caller authentication and error mapping for unary-request RPCs; other kinds are refused."""

    def __init__(self, callers: CallerRegistry | None) -> None:
        self.callers = callers

    async def intercept_service(  # pyright: ignore[reportIncompatibleMethodOverride]
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Any]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Any:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        method: str = handler_call_details.method  # type: ignore[attr-defined]
        callers = self.callers

        if handler.unary_unary:
            inner_uu: Any = handler.unary_unary

            async def unary_unary(request: Any, context: Any) -> Any:
                await _enter(method, context, callers)
                try:
                    return await inner_uu(request, context)
                except (grpc.aio.AbortError, grpc.aio.BaseError):
                    raise
                except Exception as exc:
                    await _abort_for(method, exc, context)

            return grpc.unary_unary_rpc_method_handler(
                unary_unary, handler.request_deserializer, handler.response_serializer
            )
        if handler.unary_stream:
            inner_us: Any = handler.unary_stream

            async def unary_stream(request: Any, context: Any) -> AsyncIterator[Any]:
                await _enter(method, context, callers)
                try:
                    async for response in inner_us(request, context):
                        yield response
                except (grpc.aio.AbortError, grpc.aio.BaseError):
                    raise
                except Exception as exc:
                    await _abort_for(method, exc, context)

            return grpc.unary_stream_rpc_method_handler(
                unary_stream, handler.request_deserializer, handler.response_serializer
            )
        return _refused(method, handler)


def create_server(callers: CallerRegistry | None) -> tuple[grpc.aio.Server, HealthServicer]:
    """A server with the kernel interceptor and the standard health service registered."""
    # The tracing interceptor comes first, so the caller's trace context (gRPC metadata) is
    # current while the kernel's runs; health probes (every 0.1-2 s per prober) make no spans.
    # With tracing off (OTEL_SDK_DISABLED) it would only wrap every call in spans that record nothing.
    interceptors: list[grpc.aio.ServerInterceptor] = [KernelInterceptor(callers)]
    if tracing_enabled():
        interceptors.insert(0, aio_server_interceptor(filter_=not_health_check))
    server = grpc.aio.server(
        interceptors=interceptors,
        options=[("grpc.so_reuseport", 0), ("grpc.max_receive_message_length", 8 * 1024 * 1024)],
    )
    health_servicer = HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    return server, health_servicer


@contextlib.asynccontextmanager
async def running(
    server: grpc.aio.Server,
    health_servicer: HealthServicer,
    address: str,
    *,
    service_names: tuple[str, ...] = (),
    grace_s: float = 3.0,
) -> AsyncIterator[int]:
    """Serve on `address` (host:port or unix:path); yields the bound port (0 for unix).

    On exit: report NOT_SERVING, stop accepting RPCs and give in-flight ones `grace_s`.
    """
    port = server.add_insecure_port(address)
    if port == 0 and not address.startswith("unix:"):
        raise OSError(f"could not bind gRPC address {address}")
    await server.start()
    for name in ("", *service_names):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    logger.info("grpc serving", extra={"address": address, "port": port})
    try:
        yield port
    finally:
        await health_servicer.enter_graceful_shutdown()
        await server.stop(grace_s)
