"""The HTTP edge of the error tree: one handler per error family, one status table.

The statuses come from the kernel's table (`popagent_core.errors.HTTP_STATUS_BY_GRPC_CODE`),
with two changes at the edge (`EDGE_STATUS_BY_GRPC_CODE`): CANCELLED, which reaches the gateway
only when a service stopped the call (overload, a restart; a client that goes away cancels the
route instead), is 503 with Retry-After rather than the undocumented 499; FAILED_PRECONDITION
(a valid request the resource's current state refuses: the default workspace deleted, a
finished task cancelled, the browser used while disabled) is 409 Conflict, as RFC 9110 defines
it, not 400: a 400 says the request itself is wrong, which no schema could have told the client. The OpenAPI
document's list of error answers (`ERROR_RESPONSES`) comes from the same table: a status it
can produce is documented on every /api route, without a second list to keep in step.
"""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import Any

import grpc
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from popagent_core.errors import ERROR_BY_GRPC_CODE, HTTP_STATUS_BY_GRPC_CODE, PopagentError
from popagent_gateway.dto import ErrorOut
from popagent_gateway.serving import RateLimitedLog

logger = logging.getLogger(__name__)
# Overload and outages are logged once a minute per status, however many requests they refuse.
unavailable_log = RateLimitedLog(logger)

EDGE_STATUS_BY_GRPC_CODE: dict[grpc.StatusCode, int] = {
    **HTTP_STATUS_BY_GRPC_CODE,
    grpc.StatusCode.CANCELLED: 503,
    grpc.StatusCode.FAILED_PRECONDITION: 409,
}


def edge_status(code: grpc.StatusCode) -> int:
    return EDGE_STATUS_BY_GRPC_CODE.get(code, 500)


INTERNAL_STATUS = 500
INTERNAL_MESSAGE = "internal error"

# Refusals of the edge itself, before any route or service runs.
EDGE_REFUSALS = {
    401: "missing or wrong x-popagent-key",
    413: "request body over the size cap",
    422: "invalid request; `details` names each field",
}


# What a client reads when a dependency failed rather than its request: the detail of these
# statuses is a library's or a transport's ("Stream removed (Socket closed)", "Cancelling all
# calls", "database error: FileNotFoundError") and is only logged. One text per status of
# the error tree, saying what happened and what to do.
DEPENDENCY_TEXTS: dict[grpc.StatusCode, str] = {
    grpc.StatusCode.UNAVAILABLE: (
        "A popagent service or its database is unavailable right now (restarting or down). "
        "Retry in a few seconds; /api/health shows which part."
    ),
    grpc.StatusCode.CANCELLED: (
        "A popagent service stopped this request (it is overloaded or restarting). Retry in a few seconds."
    ),
    grpc.StatusCode.DEADLINE_EXCEEDED: (
        "A popagent service did not answer in time. Retry in a moment; /api/health shows which part is slow."
    ),
}
# 503 answers say when to come back: about one supervised restart.
RETRY_AFTER_S = 5


def retry_headers(status: int) -> dict[str, str]:
    return {"Retry-After": str(RETRY_AFTER_S)} if status == 503 else {}


def error_body(message: str, **extra: object) -> dict[str, object]:
    return {"error": message, **extra}


def client_message(code: grpc.StatusCode, detail: str) -> str:
    """The text a client sees for a failure with this status: the owner's reason, except for an
    internal error, whose detail may carry internals (paths, SQL, a stack) and is only logged."""
    if EDGE_STATUS_BY_GRPC_CODE.get(code, INTERNAL_STATUS) == INTERNAL_STATUS:
        return INTERNAL_MESSAGE
    if code in DEPENDENCY_TEXTS:
        if detail:
            logger.info("dependency failure shown as its status text", extra={"code": code.name, "detail": detail})
        return DEPENDENCY_TEXTS[code]
    return detail or code.name.lower()


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return f"HTTP {status}"


def _what(code: grpc.StatusCode) -> str:
    error = ERROR_BY_GRPC_CODE.get(code)
    return (error.__doc__ or "").strip().rstrip(".") if error else code.name.lower().replace("_", " ")


def _error_responses() -> dict[int | str, dict[str, Any]]:
    causes: dict[int, list[str]] = {status: [reason] for status, reason in EDGE_REFUSALS.items()}
    for code, status in EDGE_STATUS_BY_GRPC_CODE.items():
        if status >= 400:
            what = _what(code)
            if what not in causes.setdefault(status, []):
                causes[status].append(what)
    causes[INTERNAL_STATUS].append(f"`error` is always {INTERNAL_MESSAGE!r}")
    return {
        status: {"model": ErrorOut, "description": f"{_phrase(status)}: {'; '.join(causes[status])}"}
        for status in sorted(causes)
    }


# Documented on every /api route so the OpenAPI document matches what the edge answers.
ERROR_RESPONSES = _error_responses()


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(PopagentError)
    async def popagent_error(request: Request, exc: PopagentError) -> JSONResponse:
        status = edge_status(exc.grpc_code)
        if status == 503:
            unavailable_log.warning(exc.grpc_code.name, "answering 503: %s", exc)
        body = error_body(client_message(exc.grpc_code, str(exc)))
        return JSONResponse(body, status_code=status, headers=retry_headers(status))

    @app.exception_handler(grpc.aio.AioRpcError)
    async def rpc_error(request: Request, exc: grpc.aio.AioRpcError) -> JSONResponse:
        status = edge_status(exc.code())
        if status >= 500:
            unavailable_log.warning(
                exc.code().name,
                "downstream rpc failed (%s) on %s: answering %d",
                exc.code().name,
                request.url.path,
                status,
            )
        body = error_body(client_message(exc.code(), exc.details() or ""))
        return JSONResponse(body, status_code=status, headers=retry_headers(status))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # FastAPI's own refusals (a body that is not JSON, 404, 405) in the API's one shape.
        return JSONResponse(error_body(str(exc.detail)), status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        details = [
            {"loc": list(item.get("loc", ())), "msg": item.get("msg", ""), "type": item.get("type", "")}
            for item in exc.errors()
        ]
        return JSONResponse(error_body("invalid request", details=details), status_code=422)

    @app.exception_handler(Exception)
    async def unexpected_error(request: Request, exc: Exception) -> JSONResponse:
        # A bug of the gateway's own: the documented 500 shape, never the exception's text.
        # (Starlette still re-raises it afterwards, so the server logs the traceback.)
        return JSONResponse(error_body(INTERNAL_MESSAGE), status_code=INTERNAL_STATUS)
