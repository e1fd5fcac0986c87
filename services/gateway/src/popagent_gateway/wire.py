"""Small helpers shared by the resource routers: JSON answers, validation answers, warnings."""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterable
from typing import Any, Protocol

import orjson
from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException

from popagent_gateway.deps import require_api_key
from popagent_gateway.dto import ErrorOut

WARNING_HEADER = "x-popagent-warning"

# Documented on every /api route so the OpenAPI document matches what the edge answers.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorOut, "description": "refused by the owning service (reason in `error`)"},
    401: {"model": ErrorOut, "description": "missing or wrong x-popagent-key"},
    404: {"model": ErrorOut, "description": "no such resource"},
    409: {"model": ErrorOut, "description": "already exists, or still in use"},
    413: {"model": ErrorOut, "description": "request body over the size cap"},
    422: {"model": ErrorOut, "description": "invalid request; `details` names each field"},
    503: {"model": ErrorOut, "description": "a backing service or the database is unavailable"},
}


class FieldViolation(Protocol):
    field: str
    message: str


def json_response(content: Any, status_code: int = 200, headers: dict[str, str] | None = None) -> Response:
    """Serialize once with orjson: FastAPI's own encoder would re-walk a shape we built already."""
    return Response(orjson.dumps(content), status_code=status_code, media_type="application/json", headers=headers)


def field_violations(violations: Iterable[FieldViolation]) -> RequestValidationError:
    """The owner's range and cross-field violations as the same 422 a malformed body gets."""
    return RequestValidationError(
        [{"loc": ("body", v.field), "msg": v.message, "type": "value_error"} for v in violations]
    )


def warned(response: Response, warning: str | None) -> None:
    if warning:
        response.headers[WARNING_HEADER] = warning


class ErrorBodyRoute(APIRoute):
    """The route class of the resource routers.

    - Checks the API key before FastAPI reads the body: otherwise a request without the
      key but with a malformed body would get 422 instead of 401. The router-level
      dependency stays (the route inventory checks it); this only moves the refusal first.
    - Answers FastAPI's own HTTP errors (a body that is not UTF-8 JSON) as `{"error": ...}`,
      the shape every other error of the API has, instead of FastAPI's `{"detail": ...}`.
    """

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            await require_api_key(request)
            try:
                return await handler(request)
            except HTTPException as exc:
                headers = dict(exc.headers) if exc.headers else None
                return json_response({"error": str(exc.detail)}, status_code=exc.status_code, headers=headers)

        return route
