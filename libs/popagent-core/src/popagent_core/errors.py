"""One error tree for every service, with its gRPC status and HTTP mappings.

Each boundary translates once: the database edge (`popagent_core.db.wrap_db_errors`),
the gRPC server edge (the error interceptor), the gRPC client edge
(`popagent_core.grpc_client.map_rpc_errors`) and the HTTP edge (the gateway's
exception handlers, using `HTTP_STATUS_BY_GRPC_CODE`). `asyncio.CancelledError` is
never translated.
"""

from __future__ import annotations

from typing import ClassVar

import grpc


class PopagentError(Exception):
    """Unexpected popagent error."""

    grpc_code: ClassVar[grpc.StatusCode] = grpc.StatusCode.INTERNAL

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())

    @property
    def message(self) -> str:
        return str(self)


class InvalidArgument(PopagentError):
    """Invalid argument."""

    grpc_code = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(PopagentError):
    """Resource not found."""

    grpc_code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(PopagentError):
    """Resource already exists."""

    grpc_code = grpc.StatusCode.ALREADY_EXISTS


class Conflict(PopagentError):
    """The resource changed concurrently; reload and retry."""

    grpc_code = grpc.StatusCode.ABORTED


class FailedPrecondition(PopagentError):
    """The resource is not in a state that allows this operation."""

    grpc_code = grpc.StatusCode.FAILED_PRECONDITION


class Unauthenticated(PopagentError):
    """Caller is not authenticated."""

    grpc_code = grpc.StatusCode.UNAUTHENTICATED


class PermissionDenied(PopagentError):
    """Caller may not do this."""

    grpc_code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhausted(PopagentError):
    """A limit was exceeded."""

    grpc_code = grpc.StatusCode.RESOURCE_EXHAUSTED


class Unavailable(PopagentError):
    """A dependency is unavailable; retry later."""

    grpc_code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceeded(PopagentError):
    """The operation timed out."""

    grpc_code = grpc.StatusCode.DEADLINE_EXCEEDED


class StorageError(PopagentError):
    """Database error."""

    # The driver error is on ``__cause__``.
    grpc_code = grpc.StatusCode.UNAVAILABLE


class ConfigurationError(PopagentError):
    """Invalid or missing configuration."""

    grpc_code = grpc.StatusCode.FAILED_PRECONDITION


# Most specific class for each status code, used when a client maps a status back.
ERROR_BY_GRPC_CODE: dict[grpc.StatusCode, type[PopagentError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.OUT_OF_RANGE: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.ABORTED: Conflict,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
}

# The canonical mapping from google/rpc/code.proto.
HTTP_STATUS_BY_GRPC_CODE: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.OK: 200,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.INTERNAL: 500,
    grpc.StatusCode.UNKNOWN: 500,
    grpc.StatusCode.DATA_LOSS: 500,
}


def http_status_for(error: PopagentError) -> int:
    return HTTP_STATUS_BY_GRPC_CODE.get(error.grpc_code, 500)


def from_grpc_code(code: grpc.StatusCode, message: str) -> PopagentError:
    return ERROR_BY_GRPC_CODE.get(code, PopagentError)(message)
