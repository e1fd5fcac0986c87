"""The HTTP edge of the error tree: one handler per error family, one status table."""

from __future__ import annotations

import logging

import grpc
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from popagent_core.errors import HTTP_STATUS_BY_GRPC_CODE, PopagentError, http_status_for

logger = logging.getLogger(__name__)


def error_body(message: str, **extra: object) -> dict[str, object]:
    return {"error": message, **extra}


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(PopagentError)
    async def popagent_error(request: Request, exc: PopagentError) -> JSONResponse:
        return JSONResponse(error_body(str(exc)), status_code=http_status_for(exc))

    @app.exception_handler(grpc.aio.AioRpcError)
    async def rpc_error(request: Request, exc: grpc.aio.AioRpcError) -> JSONResponse:
        status = HTTP_STATUS_BY_GRPC_CODE.get(exc.code(), 500)
        if status >= 500:
            logger.warning("downstream rpc failed", extra={"code": exc.code().name, "path": request.url.path})
        message = exc.details() or exc.code().name.lower()
        if exc.code() in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN):
            message = "internal error"
        return JSONResponse(error_body(message), status_code=status)

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
